// file_io: what tfm refuses to read (anything but a regular file, at once, never blocking on a FIFO)
// and to write (through a symbolic link, over a FIFO, device or directory), with the refused file
// named and left as it was; whole-file writes through a temporary that has no name until the commit
// gives it an exclusive, unpredictable one.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <future>
#include <string>

#include "cli_run.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gguf.h"
#include "tfm/engine/safetensors.h"

using namespace tfm;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
}

std::string kind_of(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return "missing";
  return file_kind(st.st_mode);
}

// The IoError `f` throws, "" when it throws nothing. Run on another thread: when `f` blocks (on the
// FIFO at `fifo`), a writer is opened on the FIFO to release it and the result says so, so that a
// regression fails the test instead of hanging it.
std::string error_without_blocking(const std::function<void()>& f, const std::string& fifo = "") {
  auto result = std::async(std::launch::async, [&]() -> std::string {
    try {
      f();
    } catch (const IoError& e) {
      return e.what();
    }
    return "";
  });
  if (result.wait_for(std::chrono::seconds(30)) == std::future_status::ready) return result.get();
  if (!fifo.empty()) ::close(::open(fifo.c_str(), O_RDWR | O_NONBLOCK));  // releases a blocked open
  result.wait();
  return "BLOCKED";
}

// A character device (the null device's numbers) made inside `dir`: root only. /dev/null itself is
// never touched.
bool make_char_device(const std::string& path) {
  return ::geteuid() == 0 && ::mknod(path.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0;
}

}  // namespace

TEST_CASE("file_io: reads refuse what is not a regular file at once and name it", "[file_io]") {
  tfm_test::TempDir tmp("file_io_read");
  const std::string fifo = tmp.path + "/fifo", dir = tmp.path + "/dir", dev = tmp.path + "/null",
                    file = tmp.path + "/file", link = tmp.path + "/link";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directory(dir);
  write_bytes(file, "abc");
  fs::create_symlink(file, link);
  const bool have_dev = make_char_device(dev);
  if (!have_dev) WARN("not root: the character-device cases are skipped");

  struct Reader {
    const char* name;
    std::function<void(const std::string&)> read;
  };
  const Reader readers[] = {
      {"read_file", [](const std::string& p) { read_file(p, 1 << 20); }},
      {"file_size", [](const std::string& p) { file_size(p); }},
      {"open_regular_file", [](const std::string& p) { open_regular_file(p); }},
      {"load_safetensors", [](const std::string& p) { load_safetensors(p); }},
      {"load_gguf", [](const std::string& p) { load_gguf(p); }},
  };
  for (const Reader& r : readers) {
    INFO(r.name);
    CHECK(error_without_blocking([&] { r.read(fifo); }, fifo) ==
          fifo + ": is a FIFO; expected a regular file");
    CHECK(error_without_blocking([&] { r.read(dir); }) == dir + ": is a directory; expected a regular file");
    if (have_dev)
      CHECK(error_without_blocking([&] { r.read(dev); }) ==
            dev + ": is a character device; expected a regular file");
    CHECK_THAT(error_without_blocking([&] { r.read(tmp.path + "/missing"); }),
               StartsWith(tmp.path + "/missing: cannot open: No such file or directory"));
  }
  // A link to a regular file is read like the file (only writes refuse links).
  CHECK(read_file(link, 10) == "abc");
  CHECK(kind_of(fifo) == "a FIFO");
}

TEST_CASE("file_io: AtomicFile refuses a target that is not a regular file and leaves it as it was",
          "[file_io]") {
  tfm_test::TempDir tmp("file_io_targets");
  const std::string victim = tmp.path + "/victim", link = tmp.path + "/link",
                    dangling = tmp.path + "/dangling", fifo = tmp.path + "/fifo", dir = tmp.path + "/dir",
                    dev = tmp.path + "/null";
  write_bytes(victim, "precious\n");
  fs::create_symlink(victim, link);
  fs::create_symlink(tmp.path + "/nowhere", dangling);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  fs::create_directory(dir);
  const bool have_dev = make_char_device(dev);
  if (!have_dev) WARN("not root: the character-device case is skipped");

  struct Target {
    std::string path, kind;
  };
  std::vector<Target> targets = {
      {link, "a symbolic link"}, {dangling, "a symbolic link"}, {fifo, "a FIFO"}, {dir, "a directory"}};
  if (have_dev) targets.push_back({dev, "a character device"});
  for (const Target& t : targets) {
    INFO(t.path);
    CHECK(error_without_blocking([&] { write_file_atomically(t.path, "new\n"); }, t.path) ==
          t.path + ": exists and is " + t.kind +
              "; tfm writes only regular files: remove it or choose another path");
    CHECK(kind_of(t.path) == t.kind);
    CHECK(tfm_test::temporaries_beside(t.path).empty());
  }
  CHECK(tfm_test::read_file(victim) == "precious\n");
  CHECK_FALSE(fs::exists(tmp.path + "/nowhere"));
}

TEST_CASE("file_io: AtomicFile's temporary is unnamed until the commit and gone after a failure or a kill",
          "[file_io]") {
  tfm_test::TempDir tmp("file_io_temporary");
  const std::string path = tmp.path + "/out.bin", victim = tmp.path + "/victim";
  write_bytes(victim, "precious\n");
  // A link planted at the name the temporary once had (PATH.tmp) is neither followed nor removed.
  fs::create_symlink(victim, path + ".tmp");
  write_file_atomically(path, "data\n");
  CHECK(tfm_test::read_file(path) == "data\n");
  CHECK(tfm_test::read_file(victim) == "precious\n");
  CHECK(kind_of(path + ".tmp") == "a symbolic link");

  // Two writes of the same file in flight: nothing has a name beside it until a commit (the
  // temporary is unnamed: /tmp's file systems all have O_TMPFILE), and each commit's name is its own.
  {
    AtomicFile a(path), b(path);
    CHECK(tfm_test::temporaries_beside(path).empty());
    a.write("A", 1);
    b.write("B", 1);
    a.commit();
    b.commit();
  }
  CHECK(tfm_test::read_file(path) == "B");
  CHECK(tfm_test::temporaries_beside(path).empty());

  // A writer killed in the middle leaves nothing behind, and the target as it was.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    AtomicFile killed(path);
    const std::string mb(1 << 20, 'k');
    killed.write(mb.data(), mb.size());
    ::raise(SIGKILL);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(tfm_test::temporaries_beside(path).empty());
  CHECK(tfm_test::read_file(path) == "B");

  // The written file's mode: 0644 less the umask, like any file a program creates.
  const mode_t mask = ::umask(022);
  ::umask(mask);
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == (0644 & ~mask));

  // Abandoned before commit: the temporary goes, the target stays as it was.
  {
    AtomicFile d(path);
    d.write("partial", 7);
  }
  CHECK(tfm_test::read_file(path) == "B");
  CHECK(tfm_test::temporaries_beside(path).empty());

  // A commit that fails (a directory took the name meanwhile): the temporary goes too.
  const std::string later = tmp.path + "/later";
  {
    AtomicFile e(later);
    e.write("x", 1);
    fs::create_directory(later);
    fs::create_directory(later + "/keep");
    CHECK_THROWS_WITH(e.commit(), StartsWith(later + ": cannot rename"));
  }
  CHECK(kind_of(later) == "a directory");
  CHECK(tfm_test::temporaries_beside(later).empty());

  // A directory that does not exist: the target is named.
  CHECK_THROWS_WITH(write_file_atomically(tmp.path + "/no/such", ""),
                    StartsWith(tmp.path + "/no/such: cannot create a temporary file beside it"));
}

TEST_CASE("file_io: appends and lock files never follow a link nor open a FIFO or device", "[file_io]") {
  tfm_test::TempDir tmp("file_io_append");
  const std::string victim = tmp.path + "/victim", link = tmp.path + "/link", fifo = tmp.path + "/fifo",
                    dev = tmp.path + "/null", log = tmp.path + "/train.log";
  write_bytes(victim, "precious\n");
  fs::create_symlink(victim, link);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const bool have_dev = make_char_device(dev);
  if (!have_dev) WARN("not root: the character-device case is skipped");

  for (const bool truncate : {false, true}) {
    INFO("truncate " << truncate);
    CHECK(error_without_blocking([&] { open_for_append(link, truncate); }) ==
          link +
              ": exists and is a symbolic link; tfm writes only regular files: remove it or choose another "
              "path");
    CHECK_THAT(error_without_blocking([&] { open_for_append(fifo, truncate); }, fifo),
               StartsWith(fifo + ": exists and is a FIFO"));
    if (have_dev)
      CHECK_THAT(error_without_blocking([&] { open_for_append(dev, truncate); }),
                 StartsWith(dev + ": exists and is a character device"));
  }
  CHECK_THAT(error_without_blocking([&] { open_lock_file(link); }),
             StartsWith(link + ": exists and is a symbolic link"));
  CHECK_THAT(error_without_blocking([&] { open_lock_file(fifo); }, fifo),
             StartsWith(fifo + ": exists and is a FIFO"));
  CHECK(tfm_test::read_file(victim) == "precious\n");
  CHECK(kind_of(link) == "a symbolic link");

  // A regular file: appended to, or emptied first.
  {
    const FileDescriptor fd = open_for_append(log, false);
    write_all(fd.get(), "one\n", 4, log);
  }
  {
    const FileDescriptor fd = open_for_append(log, false);
    write_all(fd.get(), "two\n", 4, log);
  }
  CHECK(tfm_test::read_file(log) == "one\ntwo\n");
  {
    const FileDescriptor fd = open_for_append(log, true);
    write_all(fd.get(), "three\n", 6, log);
  }
  CHECK(tfm_test::read_file(log) == "three\n");
}
