// Corpora (corpus.h): data.path to a sorted list of files, and files to a stream of documents.
#include "tfm/data/corpus.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tfm/data/token_cache.h"
#include "tfm/data/utf8.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/strings.h"

namespace tfm {
namespace fs = std::filesystem;

namespace {

// The names a directory walk takes (an explicitly named file may have any name), matched in any case
// (.TXT, .Jsonl.GZ): a text name (one document a file), the JSON Lines name, each plain or under a
// compression tfm reads as it reads. Markdown is left out and said, not read: a folder's README.md
// (a dataset card) would be trained on unseen; docs/data.md says why.
constexpr std::string_view kTextNames[] = {".txt", ".text"};
constexpr std::string_view kJsonLinesName = ".jsonl";
constexpr std::string_view kGzipName = ".gz", kZstdName = ".zst";
// Compressions tfm does not read: a corpus name under one (a.txt.xz) is left out, and said.
constexpr std::string_view kUnreadPackedNames[] = {".xz", ".bz2", ".lz4",  ".zip",
                                                   ".7z", ".lz",  ".lzma", ".z"};

// Whether `name` ends with `ext` (lower case) in any case of its ASCII letters.
bool ends_with_name(std::string_view name, std::string_view ext) {
  return name.size() >= ext.size() && ascii_lower(name.substr(name.size() - ext.size())) == ext;
}

enum class Compression { None, Gzip, Zstd };

Compression compression_of(std::string_view path) {
  return ends_with_name(path, kGzipName)   ? Compression::Gzip
         : ends_with_name(path, kZstdName) ? Compression::Zstd
                                           : Compression::None;
}

// The name without the compression tfm reads it through (a.txt.gz -> a.txt).
std::string_view uncompressed_name(std::string_view path) {
  const Compression c = compression_of(path);
  return path.substr(0, path.size() - (c == Compression::Gzip   ? kGzipName.size()
                                       : c == Compression::Zstd ? kZstdName.size()
                                                                : 0));
}

// Whether a plain (uncompressed) name is a text or the JSON Lines name.
bool is_plain_corpus_name(std::string_view name) {
  return ends_with_name(name, kJsonLinesName) ||
         std::any_of(std::begin(kTextNames), std::end(kTextNames),
                     [&](std::string_view ext) { return ends_with_name(name, ext); });
}

// The names a walk takes, in words: ".txt, .text or .jsonl, plain, .gz or .zst, in any case".
std::string corpus_names_text() {
  std::string out;
  for (std::string_view ext : kTextNames) out += std::string(ext) + ", ";
  out.resize(out.size() - 2);
  return out + " or " + std::string(kJsonLinesName) + ", plain, " + std::string(kGzipName) + " or " +
         std::string(kZstdName) + ", in any case";
}

// Compressed formats by their first bytes. Only gzip and zstd are decompressed (by their names);
// the others, or gzip/zstd under another name, would be read as bytes of text.
enum class Packed { None, Gzip, Zstd, Xz, Bzip2, Lz4, Zip, SevenZip, Lzip, UnixCompress };

Packed packed_format(std::string_view h) {
  const auto starts = [&](std::string_view magic) { return h.substr(0, magic.size()) == magic; };
  using namespace std::string_view_literals;
  if (starts("\x1f\x8b\x08"sv)) return Packed::Gzip;
  if (starts("\x28\xb5\x2f\xfd"sv)) return Packed::Zstd;
  if (starts("\xfd\x37\x7a\x58\x5a\x00"sv)) return Packed::Xz;
  // "BZh", the block size digit, then a block's or the end's signature: text may begin "BZh9" too.
  if (h.size() >= 10 && starts("BZh") && h[3] >= '1' && h[3] <= '9' &&
      (h.substr(4, 6) == "\x31\x41\x59\x26\x53\x59"sv || h.substr(4, 6) == "\x17\x72\x45\x38\x50\x90"sv))
    return Packed::Bzip2;
  if (starts("\x04\x22\x4d\x18"sv) || starts("\x02\x21\x4c\x18"sv)) return Packed::Lz4;
  if (starts("PK\x03\x04"sv) || starts("PK\x05\x06"sv)) return Packed::Zip;
  if (starts("\x37\x7a\xbc\xaf\x27\x1c"sv)) return Packed::SevenZip;
  if (starts("LZIP\x01"sv)) return Packed::Lzip;
  if (starts("\x1f\x9d"sv)) return Packed::UnixCompress;
  return Packed::None;
}

// What a user runs to get the text back out of each format.
struct PackedName {
  const char* format;
  const char* undo;
};
PackedName packed_name(Packed p) {
  switch (p) {
    case Packed::Gzip:
      return {"gzip", "gunzip"};
    case Packed::Zstd:
      return {"zstd", "unzstd"};
    case Packed::Xz:
      return {"xz", "unxz"};
    case Packed::Bzip2:
      return {"bzip2", "bunzip2"};
    case Packed::Lz4:
      return {"lz4", "lz4 -d"};
    case Packed::Zip:
      return {"a zip archive", "unzip"};
    case Packed::SevenZip:
      return {"a 7z archive", "7z x"};
    case Packed::Lzip:
      return {"lzip", "lzip -d"};
    case Packed::UnixCompress:
      return {"compress (.Z)", "uncompress"};
    case Packed::None:
      break;
  }
  return {"", ""};
}

// Refuses a file whose first bytes say it is compressed in a way its name does not (a .bz2 or .xz, a
// gzip stream named .txt): read as text, its compressed bytes would be trained on.
void check_not_packed(const std::string& path, Compression named, std::string_view head) {
  const Packed p = packed_format(head);
  if (p == Packed::None || (p == Packed::Gzip && named == Compression::Gzip) ||
      (p == Packed::Zstd && named == Compression::Zstd))
    return;
  const PackedName n = packed_name(p);
  if (p == Packed::Gzip || p == Packed::Zstd) {
    const std::string ext = p == Packed::Gzip ? ".gz" : ".zst";
    throw IoError(path + ": holds " + n.format + "-compressed data, but its name does not end in " + ext +
                  ", so it would be read as compressed bytes: rename it to end in " + ext +
                  " (tfm decompresses a .gz or .zst file as it reads it; .txt" + ext + " or .jsonl" + ext +
                  " say what is inside)");
  }
  const bool archive = p == Packed::Zip || p == Packed::SevenZip;
  throw IoError(path + ": is " + (archive ? std::string(n.format) : std::string(n.format) + "-compressed") +
                ", which tfm does not read (it would train on the compressed bytes): " +
                (archive ? "extract it (" : "decompress it (") + n.undo +
                "), or recompress the text as .gz or .zst, which tfm decompresses as it reads");
}

// The name without its compression suffix decides the format.
bool is_json_lines(const std::string& path) {
  return ends_with_name(uncompressed_name(path), kJsonLinesName);
}

// The names a directory walk takes (kTextNames, kJsonLinesName; plain, .gz or .zst; in any case).
bool is_corpus_name(const std::string& name) {
  return is_plain_corpus_name(uncompressed_name(name));
}

// A corpus file's name compressed in a format tfm does not read (a.txt.xz): a walk leaves it out and
// says so, since its name says it holds text.
bool is_unread_packed_name(std::string_view name) {
  for (std::string_view outer : kUnreadPackedNames)
    if (ends_with_name(name, outer) && is_plain_corpus_name(name.substr(0, name.size() - outer.size())))
      return true;
  return false;
}

// "N files (a, b, c, ...)" with the first few paths.
std::string counted_paths(const std::vector<std::string>& paths, const char* what) {
  constexpr size_t kShown = 5;
  std::string out = std::to_string(paths.size()) + " " + what + (paths.size() == 1 ? "" : "s") + " (";
  for (size_t i = 0; i < paths.size() && i < kShown; ++i) out += (i ? ", " : "") + paths[i];
  return out + (paths.size() > kShown ? ", ...)" : ")");
}

bool has_wildcard(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// The entries of a data.path: a JSON list's strings, else the path itself.
std::vector<std::string> entries_of(const std::string& spec) {
  if (spec.empty() || spec[0] != '[' || exists(spec)) return {spec};
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(spec);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("data.path: " + spec + " starts with '[' but is not a JSON list of paths (" + e.what() +
                      ")");
  }
  if (!j.is_array() || j.empty())
    throw ConfigError("data.path: " + spec +
                      ": expected a non-empty JSON list of paths, directories or globs");
  std::vector<std::string> out;
  for (const auto& e : j) {
    if (!e.is_string() || e.get<std::string>().empty())
      throw ConfigError("data.path: " + spec + ": every entry of the list must be a non-empty string, got " +
                        e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// "a/b/" -> "a/b": a directory named with a trailing slash has the directory's name.
std::string without_trailing_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// Where a symbolic link points, for messages ("?" when it cannot be read).
std::string link_target(const std::string& path) {
  std::error_code ec;
  const fs::path t = fs::read_symlink(path, ec);
  return ec ? std::string("?") : t.string();
}

// A link whose target is missing is a file of the corpus that is missing: named, never skipped.
[[noreturn]] void throw_dangling(const std::string& path, const std::string& entry) {
  throw IoError(path + ": is a symbolic link to " + link_target(path) +
                ", which does not exist (data.path entry " + entry +
                "): a file of the corpus is missing; restore its target or remove the link");
}

bool is_dangling_link(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && ::stat(path.c_str(), &st) != 0;
}

CorpusFile stat_file(const std::string& path, const std::string& entry) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT && is_dangling_link(path)) throw_dangling(path, entry);
    throw IoError(path + ": cannot open: " + std::strerror(errno) + " (data.path entry " + entry + ")");
  }
  if (!S_ISREG(st.st_mode))
    throw IoError(path + ": is " + file_kind(st.st_mode) + "; expected a regular file (data.path entry " +
                  entry + ")");
  if (::access(path.c_str(), R_OK) != 0)
    throw IoError(path + ": cannot read it: " + std::strerror(errno) + " (data.path entry " + entry + ")");
  CorpusFile f{
      path, static_cast<uint64_t>(st.st_size),
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec)};
  f.device = static_cast<uint64_t>(st.st_dev);
  f.inode = static_cast<uint64_t>(st.st_ino);
  return f;
}

// Whether a folder's names are a tfm run's output: its resolved config beside its log, metrics or a
// checkpoint (training/run_dir.h's files; data/ does not depend on training/).
bool is_run_folder(const std::vector<std::string>& names) {
  const auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  return has("config.json") && (has("metrics.jsonl") || has("train.log") ||
                                std::any_of(names.begin(), names.end(),
                                            [](const std::string& n) { return ends_with(n, ".ckpt"); }));
}

// A directory walk (corpus.h): every corpus file below `root`, in sorted path order. Links are
// followed, a directory link too (a corpus of links to data kept elsewhere), but never into a folder
// the walk is already inside (a loop). What it leaves out is noted, hidden entries aside.
struct Walk {
  std::string entry;
  std::vector<std::string> found, packed, loops, dangling, runs, other;
  std::vector<std::pair<dev_t, ino_t>> inside;  // the folders from the root down to the current one

  void dir(const std::string& path) {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
      names.push_back(it->path().filename().string());
    if (ec)
      throw IoError(path + ": cannot read the directory: " + ec.message() + " (data.path entry " + entry +
                    ")");
    // A run's metrics.jsonl is no corpus (data.path=. in a folder that holds runs/), nor is a sweep's
    // or an ablation's results file.
    if (is_run_folder(names)) {
      runs.push_back(path);
      return;
    }
    for (const std::string& name : names) {
      if (name.empty() || name[0] == '.') continue;  // hidden, and so .tfm-cache
      const std::string p = (fs::path(path) / name).string();
      struct stat st;
      if (::stat(p.c_str(), &st) != 0) {
        if (!is_dangling_link(p)) continue;  // gone since it was listed
        if (is_corpus_name(name)) throw_dangling(p, entry);
        dangling.push_back(p + " -> " + link_target(p));
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
        if (std::find(inside.begin(), inside.end(), id) != inside.end()) {
          loops.push_back(p + " = " + fs::canonical(p, ec).string());
          continue;
        }
        inside.push_back(id);
        dir(p);
        inside.pop_back();
      } else if (S_ISREG(st.st_mode)) {
        if (name == "sweep.jsonl" || name == "ablate.jsonl") {
          runs.push_back(p);
          continue;
        }
        if (is_corpus_name(name))
          found.push_back(p);
        else if (is_unread_packed_name(name))
          packed.push_back(p);
        else
          other.push_back(p);  // four.json, photo.png: said with a count, so nothing vanishes unseen
      }
    }
  }
};

void walk(const std::string& dir, const std::string& entry, std::vector<CorpusFile>& out,
          std::vector<std::string>& notes) {
  Walk w;
  w.entry = entry;
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) w.inside.emplace_back(st.st_dev, st.st_ino);
  w.dir(dir);
  std::sort(w.found.begin(), w.found.end());
  std::sort(w.packed.begin(), w.packed.end());
  if (!w.packed.empty())
    notes.push_back(dir + ": left out " + counted_paths(w.packed, "file") +
                    ", compressed in a format tfm does not read: decompress them, or recompress them as .gz "
                    "or .zst, to train on them");
  std::sort(w.runs.begin(), w.runs.end());
  if (!w.runs.empty())
    notes.push_back(dir + ": left out " + counted_paths(w.runs, "tfm output") +
                    ": a run's folder (config.json with metrics.jsonl, train.log or a checkpoint) and a "
                    "sweep's or ablation's results are what tfm wrote, not corpus");
  if (!w.loops.empty())
    notes.push_back(dir + ": did not follow " + counted_paths(w.loops, "folder") +
                    ", reached through a link, that the walk was already inside (a loop of links)");
  if (!w.dangling.empty())
    notes.push_back(dir + ": left out " + counted_paths(w.dangling, "link") +
                    " whose target does not exist (not named as corpus files)");
  std::sort(w.other.begin(), w.other.end());
  if (!w.other.empty())
    notes.push_back(dir + ": left out " + counted_paths(w.other, "file") + ", not named as corpus files (" +
                    corpus_names_text() +
                    "): a file data.path names (alone, in a list or by a glob) is read whatever its name");
  for (const std::string& f : w.found) out.push_back(stat_file(f, entry));
}

void add_path(const std::string& path, const std::string& entry, std::vector<CorpusFile>& out,
              std::vector<std::string>& notes) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const size_t before = out.size(), said = notes.size();
    walk(without_trailing_slash(path), entry, out, notes);
    if (out.size() == before) {
      std::string left_out;
      for (size_t i = said; i < notes.size(); ++i) left_out += "; " + notes[i];
      throw IoError(path + ": the directory holds no corpus file (" + corpus_names_text() +
                    "; hidden entries skipped) (data.path entry " + entry + ")" + left_out);
    }
    return;
  }
  out.push_back(stat_file(path, entry));
}

// Whether a path names its file where it is, through no link (of the file or of a folder on the way).
bool is_real_path(const std::string& path) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(path, ec);
  return !ec && canonical == fs::absolute(path).lexically_normal();
}

// One file reached twice within an entry (a walk or a glob, through a symbolic or hard link) is read
// once, where it is (the path through no link; else the first): a second copy of a document would
// train twice, or leak into validation. Said in `notes`.
void drop_links_to_the_same_file(std::vector<CorpusFile>& files, const std::string& entry,
                                 std::vector<std::string>& notes) {
  std::vector<size_t> keep;  // for each file, the index of the one read in its place
  std::vector<std::string> dropped;
  std::map<std::pair<uint64_t, uint64_t>, size_t> first;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto [it, fresh] = first.emplace(std::make_pair(files[i].device, files[i].inode), i);
    if (!fresh && !is_real_path(files[it->second].path) && is_real_path(files[i].path)) it->second = i;
  }
  std::vector<CorpusFile> out;
  for (size_t i = 0; i < files.size(); ++i) {
    const size_t kept = first.at({files[i].device, files[i].inode});
    if (kept == i)
      out.push_back(files[i]);
    else
      dropped.push_back(files[i].path + " (the same file as " + files[kept].path + ")");
  }
  if (!dropped.empty())
    notes.push_back(entry + ": left out " + counted_paths(dropped, "file") +
                    ", reached a second time through a link (symbolic or hard): each file is read once");
  files = std::move(out);
}

std::string hex16(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

bool is_compressed(const std::string& path) {
  return compression_of(path) != Compression::None;
}

bool is_single_file(const std::string& spec) {
  const std::vector<std::string> e = entries_of(spec);
  if (e.size() != 1 || e[0] != spec) return false;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) return false;
  return !has_wildcard(spec) || exists(spec);
}

std::vector<CorpusFile> list_corpus(const std::string& spec, std::vector<std::string>* notes) {
  std::vector<CorpusFile> out;
  std::vector<std::string> ignored;
  std::vector<std::string>& said = notes ? *notes : ignored;
  for (const std::string& entry : entries_of(spec)) {
    std::vector<CorpusFile> files;
    if (has_wildcard(entry) && !exists(entry)) {
      glob_t g{};
      const int rc = ::glob(entry.c_str(), GLOB_ERR, nullptr, &g);
      std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + g.gl_pathc);  // sorted by glob(3)
      ::globfree(&g);
      if (rc == GLOB_NOMATCH || matches.empty())
        throw IoError("data.path: the pattern " + entry + " matches no file");
      if (rc != 0)
        throw IoError("data.path: the pattern " + entry + " cannot be expanded (a directory is unreadable)");
      for (const std::string& m : matches) add_path(m, entry, files, said);
    } else {
      add_path(entry, entry, files, said);
    }
    drop_links_to_the_same_file(files, entry, said);
    out.insert(out.end(), files.begin(), files.end());
  }
  // Two entries the user wrote that reach one file: which one is meant is theirs to say.
  std::map<std::pair<uint64_t, uint64_t>, const CorpusFile*> seen;
  for (const CorpusFile& f : out) {
    const auto [it, fresh] = seen.emplace(std::make_pair(f.device, f.inode), &f);
    if (!fresh)
      throw IoError("data.path: " + f.path + " is named twice" +
                    (it->second->path == f.path ? "" : " (as " + it->second->path + " too, the same file)") +
                    " (each file is read once: remove one of the entries)");
  }
  return out;
}

std::string corpus_name(const std::string& spec) {
  const std::vector<std::string> e = entries_of(spec);
  if (e.size() != 1 || e[0] != spec || (has_wildcard(spec) && !exists(spec)))
    return "corpus-" + hex16(hash64(spec.data(), spec.size()));
  const fs::path p = fs::path(without_trailing_slash(spec));
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") {
    // "." or "dir/..": the folder's own name, never "" (a hidden ".char.tokens").
    std::error_code ec;
    const std::string real = fs::weakly_canonical(fs::absolute(p), ec).filename().string();
    if (!ec && !real.empty()) return real;
    return "corpus-" + hex16(hash64(spec.data(), spec.size()));  // "/"
  }
  return name;
}

std::string corpus_home(const std::string& spec) {
  const std::vector<std::string> e = entries_of(spec);
  std::string first = without_trailing_slash(e[0]);
  if (has_wildcard(first) && !exists(first)) {
    // The directories before the first component with a wildcard.
    const size_t w = first.find_first_of("*?[");
    const size_t slash = first.rfind('/', w);
    return slash == std::string::npos ? "" : first.substr(0, slash == 0 ? 1 : slash);
  }
  // A folder is its own home: its cache inside it (hidden from the walk) moves with it.
  std::error_code ec;
  if (fs::is_directory(first, ec)) return first;
  return fs::path(first).parent_path().string();
}

std::string absolute_corpus_spec(const std::string& spec) {
  const std::vector<std::string> entries = entries_of(spec);
  if (entries.size() == 1 && entries[0] == spec) return fs::absolute(spec).string();
  nlohmann::json list = nlohmann::json::array();
  for (const std::string& e : entries) list.push_back(fs::absolute(e).string());
  return list.dump();
}

std::string corpus_spec_names(const std::string& spec) {
  const auto name = [](const std::string& entry) {
    fs::path p = fs::path(entry).lexically_normal();  // "/a/b/.", "/a/b/" -> "/a/b/"
    if (!p.has_filename()) p = p.parent_path();
    const std::string last = p.filename().string();
    return last.empty() ? entry : last;  // "/" has no name but leaks nothing
  };
  const std::vector<std::string> entries = entries_of(spec);
  if (entries.size() == 1 && entries[0] == spec) return name(spec);
  nlohmann::json list = nlohmann::json::array();
  for (const std::string& e : entries) list.push_back(name(e));
  return list.dump();
}

std::string corpus_location(const std::string& spec) {
  std::string out;
  for (const std::string& entry : entries_of(spec)) {
    std::error_code ec;
    const fs::path abs = fs::absolute(without_trailing_slash(entry)).lexically_normal();
    const fs::path real = has_wildcard(entry) && !exists(entry) ? abs : fs::weakly_canonical(abs, ec);
    out += (out.empty() ? "" : "\n") + (ec ? abs : real).string();
  }
  return out;
}

bool has_json_lines(const std::vector<CorpusFile>& files) {
  return std::any_of(files.begin(), files.end(), [](const CorpusFile& f) { return is_json_lines(f.path); });
}

// ---- reading ----

namespace {

// A file's bytes, decompressed, in chunks of at most kHashBlockBytes; its bytes on disk are hashed
// in kHashBlockBytes blocks as they are read (the cache's source hash).
class FileStream {
 public:
  explicit FileStream(const std::string& path)
      : path_(path), fd_(open_regular_file(path)), compression_(compression_of(path)) {
    char head[16];
    check_not_packed(path, compression_,
                     std::string_view(head, read_at(fd_.get(), head, sizeof head, 0, path)));
    ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    if (compression_ == Compression::Gzip) {
      zs_ = std::make_unique<z_stream>();
      std::memset(zs_.get(), 0, sizeof(z_stream));
      if (inflateInit2(zs_.get(), 15 + 32) != Z_OK) throw IoError(path + ": cannot start a gzip decoder");
    } else if (compression_ == Compression::Zstd) {
      zd_ = ZSTD_createDStream();
      if (!zd_) throw IoError(path + ": cannot start a zstd decoder");
    }
  }
  ~FileStream() {
    if (zs_) inflateEnd(zs_.get());
    if (zd_) ZSTD_freeDStream(zd_);
  }
  FileStream(const FileStream&) = delete;
  FileStream& operator=(const FileStream&) = delete;

  // Appends the next decompressed bytes to out; false (nothing appended) at the end of the file.
  bool read(std::string& out) {
    if (compression_ == Compression::None) {
      if (!refill()) return false;
      out.append(raw_);
      pos_ = raw_.size();
      return true;
    }
    for (;;) {
      if (pos_ == raw_.size() && !output_full_ && !refill()) {
        if (!frame_done_)
          throw IoError(path_ + ": truncated " + (compression_ == Compression::Gzip ? "gzip" : "zstd") +
                        " data (the file ends inside a compressed stream)");
        return false;
      }
      const size_t start = out.size();
      out.resize(start + kHashBlockBytes);
      const size_t produced = compression_ == Compression::Gzip ? inflate_into(out.data() + start)
                                                                : zstd_into(out.data() + start);
      out.resize(start + produced);
      if (produced > 0) return true;
    }
  }
  uint64_t hash() const { return hash_; }

 private:
  // The next raw block; false at the end of the file.
  bool refill() {
    raw_.resize(kHashBlockBytes);
    const size_t n = read_at(fd_.get(), raw_.data(), raw_.size(), offset_, path_);
    raw_.resize(n);
    pos_ = 0;
    if (n == 0) return false;
    hash_ = hash_fold(hash_, hash64(raw_.data(), n));
    offset_ += n;
    // A gzip member ended and more bytes follow: the next member (concatenated .gz files are one).
    if (compression_ == Compression::Gzip && frame_done_) inflateReset(zs_.get());
    return true;
  }

  size_t inflate_into(char* dst) {
    z_stream& z = *zs_;
    if (frame_done_ && pos_ < raw_.size()) inflateReset(&z);
    z.next_in = reinterpret_cast<Bytef*>(raw_.data() + pos_);
    z.avail_in = static_cast<uInt>(raw_.size() - pos_);
    z.next_out = reinterpret_cast<Bytef*>(dst);
    z.avail_out = static_cast<uInt>(kHashBlockBytes);
    const int rc = inflate(&z, Z_NO_FLUSH);
    pos_ = raw_.size() - z.avail_in;
    const size_t produced = kHashBlockBytes - z.avail_out;
    output_full_ = z.avail_out == 0;
    if (rc == Z_STREAM_END) {
      frame_done_ = true;
    } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
      frame_done_ = false;
    } else {
      throw IoError(path_ + ": not valid gzip data near byte " +
                    std::to_string(offset_ - raw_.size() + pos_) +
                    " (zlib: " + (z.msg ? z.msg : "error " + std::to_string(rc)) + ")");
    }
    return produced;
  }

  size_t zstd_into(char* dst) {
    ZSTD_inBuffer in{raw_.data(), raw_.size(), pos_};
    ZSTD_outBuffer o{dst, kHashBlockBytes, 0};
    const size_t rc = ZSTD_decompressStream(zd_, &o, &in);
    if (ZSTD_isError(rc))
      throw IoError(path_ + ": not valid zstd data near byte " +
                    std::to_string(offset_ - raw_.size() + in.pos) + " (" + ZSTD_getErrorName(rc) + ")");
    pos_ = in.pos;
    output_full_ = o.pos == o.size;
    if (in.size > 0) frame_done_ = rc == 0;
    return o.pos;
  }

  std::string path_;
  FileDescriptor fd_;
  Compression compression_;
  std::string raw_;  // the last block read from disk
  size_t pos_ = 0;   // of raw_ consumed
  uint64_t offset_ = 0;
  uint64_t hash_ = kHashFoldStart;
  bool output_full_ = false;  // the decoder may hold more output for the same input
  bool frame_done_ = false;   // the last compressed stream ended (an empty file never started one)
  std::unique_ptr<z_stream> zs_;
  ZSTD_DStream* zd_ = nullptr;
};

constexpr size_t kShownSkips = 5;

// The fields a record has, for the error that its data.text_field is not among them: "its fields:
// \"body\", \"id\"", the first five (sorted, as nlohmann keeps them), each cut to 40 bytes.
std::string fields_of(const nlohmann::json& record) {
  constexpr size_t kShownFields = 5, kNameBytes = 40;
  if (record.empty()) return "it has no fields";
  std::string out = "its fields: ";
  size_t i = 0;
  for (auto it = record.begin(); it != record.end() && i < kShownFields; ++it, ++i) {
    std::string name = it.key();
    if (name.size() > kNameBytes) name = name.substr(0, kNameBytes) + "...";  // replaced if cut mid-character
    out +=
        (i ? ", " : "") + nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (record.size() > kShownFields) out += ", and " + std::to_string(record.size() - kShownFields) + " more";
  return out;
}

}  // namespace

struct CorpusReader::State {
  std::vector<CorpusFile> files;
  CorpusOptions options;
  size_t block = 0;
  size_t next_file = 0;  // files_[next_file] is opened when the current one ends
  std::unique_ptr<FileStream> stream;
  bool json_lines = false;
  std::string path;  // of the open file
  std::string text;  // decompressed bytes not yet handed out (text) or not yet split (JSON Lines)
  size_t text_pos = 0;
  bool stream_done = false;
  bool file_start = false;  // text: nothing of the open file read yet (where a byte order mark may be)
  bool held_cr = false;     // text: the last block read ended in CR, held back until the next shows LF
  uint64_t line = 0;        // JSON Lines: lines read from the open file
  uint64_t records = 0;     // JSON Lines: records read (lines not blank), bad ones too
  std::string record;       // JSON Lines: the current record's text
  size_t record_pos = 0;
  bool in_document = false;
  std::string name;
  uint64_t documents = 0, skipped = 0, text_bytes = 0;
  std::vector<std::string> first_skipped;
  std::vector<uint64_t> hashes;

  void close_file() {
    if (stream) hashes.push_back(stream->hash());
    stream.reset();
  }
  bool open_next_file() {
    close_file();
    if (next_file == files.size()) return false;
    path = files[next_file++].path;
    stream = std::make_unique<FileStream>(path);
    json_lines = is_json_lines(path);
    text.clear(), text_pos = 0, stream_done = false, line = 0;
    file_start = true, held_cr = false;
    return true;
  }
  // More decompressed bytes into `text`; false at the end of the file.
  bool more() {
    if (stream_done) return false;
    if (text_pos > 0) text.erase(0, text_pos), text_pos = 0;
    const size_t start = text.size();
    if (!stream->read(text)) {
      stream_done = true;
      if (!held_cr) return false;
      held_cr = false;
      text.push_back('\r');  // the file ends in a CR: no LF follows it
      return true;
    }
    if (!json_lines) read_as_text(start);
    return true;
  }
  // A text file is read as text, as Python's text mode reads it: a UTF-8 byte order mark at its start
  // is no character, and a Windows line end (CRLF) is LF, so that a file saved on Windows trains like
  // the same text saved here (a lone CR stays). `text` from `start` holds the bytes just read.
  void read_as_text(size_t start) {
    if (file_start) {
      file_start = false;
      if (starts_with_byte_order_mark(std::string_view(text).substr(start)))
        text.erase(start, kUtf8ByteOrderMark.size());
    }
    if (held_cr) text.insert(start, 1, '\r'), held_cr = false;
    size_t cr = text.find('\r', start);
    if (cr == std::string::npos) return;
    size_t kept = cr;  // text[start, kept) is done
    for (; cr < text.size(); ++cr)
      if (text[cr] != '\r' || cr + 1 == text.size() || text[cr + 1] != '\n') text[kept++] = text[cr];
    text.resize(kept);
    // A CR ending the block may begin a CRLF the next block ends: hold it back until then.
    if (kept > start && text.back() == '\r') text.pop_back(), held_cr = true;
  }
  // The next line of the open file into `out` (without its newline); false at its end.
  bool next_line(std::string& out) {
    for (;;) {
      const size_t nl = text.find('\n', text_pos);
      if (nl != std::string::npos) {
        out.assign(text, text_pos, nl - text_pos);
        text_pos = nl + 1;
        ++line;
        return true;
      }
      if (!more()) {
        if (text_pos == text.size()) return false;
        out.assign(text, text_pos, std::string::npos);
        text_pos = text.size();
        ++line;
        return true;
      }
    }
  }
  void bad(const std::string& why) {
    const std::string where = path + ":" + std::to_string(line) + ": ";
    if (!options.skip_bad_records)
      throw IoError(where + why + " (" + options.skip_option + " skips such records and counts them)");
    ++skipped;
    if (first_skipped.size() < kShownSkips) first_skipped.push_back(where + why);
  }
  // The next non-empty record of the open file into `record`; false at the end of the file.
  bool next_record() {
    std::string l;
    while (next_line(l)) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
      if (l.find_first_not_of(" \t") == std::string::npos) continue;  // a blank line is no record
      ++records;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(l);
      } catch (const nlohmann::json::exception& e) {
        bad(std::string("not JSON (") + e.what() + ")");
        continue;
      }
      const std::string& field = options.text_field;
      if (!j.is_object()) {
        bad("not a JSON object (expected {\"" + field + "\": \"...\"}), got " + std::string(j.type_name()));
        continue;
      }
      const auto it = j.find(field);
      if (it == j.end()) {
        bad("the record has no field \"" + field + "\" (" + fields_of(j) + "); set " +
            options.text_field_option + " to the field that holds the text");
        continue;
      }
      if (!it->is_string()) {
        bad("the field \"" + field + "\" (" + options.text_field_option + ") is " +
            std::string(it->type_name()) + ", not a string");
        continue;
      }
      record = it->get<std::string>();
      record_pos = 0;
      if (record.empty()) continue;  // no text: no document
      return true;
    }
    return false;
  }
};

CorpusReader::CorpusReader(std::vector<CorpusFile> files, CorpusOptions options)
    : state_(std::make_unique<State>()) {
  state_->files = std::move(files);
  state_->block = options.block_bytes == 0 ? kHashBlockBytes : options.block_bytes;
  state_->options = std::move(options);
}

CorpusReader::~CorpusReader() = default;

bool CorpusReader::next_document() {
  State& s = *state_;
  s.in_document = false;
  for (;;) {
    if (s.stream && s.json_lines) {
      if (s.next_record()) {
        s.name = s.path + ":" + std::to_string(s.line);
        break;
      }
    }
    if (!s.open_next_file()) return false;
    if (!s.json_lines) {
      // A read may leave no text (a block of a byte order mark or one held-back CR): read on.
      while (s.text.empty() && s.more()) {
      }
      if (s.text.empty()) continue;  // an empty file is no document
      s.name = s.path;
      s.stream_done = false;
      break;
    }
  }
  s.in_document = true;
  ++s.documents;
  return true;
}

bool CorpusReader::read(std::string& buf) {
  State& s = *state_;
  if (!s.in_document) return false;
  if (s.json_lines) {
    const size_t n = std::min(s.block, s.record.size() - s.record_pos);
    buf.append(s.record, s.record_pos, n);
    s.record_pos += n;
    s.text_bytes += n;
    return n > 0;
  }
  if (s.text_pos == s.text.size() && !s.more()) {
    s.close_file();  // the text document ends with its file: its hash is complete
    s.in_document = false;
    return false;
  }
  const size_t n = std::min(s.block, s.text.size() - s.text_pos);
  buf.append(s.text, s.text_pos, n);
  s.text_pos += n;
  s.text_bytes += n;
  return true;
}

const std::string& CorpusReader::document_name() const {
  return state_->name;
}
uint64_t CorpusReader::documents() const {
  return state_->documents;
}
uint64_t CorpusReader::text_bytes() const {
  return state_->text_bytes;
}
uint64_t CorpusReader::skipped() const {
  return state_->skipped;
}
const std::vector<std::string>& CorpusReader::first_skipped() const {
  return state_->first_skipped;
}
std::string CorpusReader::skipped_text() const {
  const State& s = *state_;
  if (s.skipped == 0) return "";
  const std::string n = std::to_string(s.skipped), option = " (" + s.options.skip_option + ")";
  const std::string how = s.skipped == s.records
                              ? (s.skipped == 1 ? "its one record was skipped as bad" + option
                                                : "all " + n + " of its records were skipped as bad" + option)
                              : n + " of its " + std::to_string(s.records) + " records were skipped as bad" +
                                    option + " and the others' text is empty";
  return how + ", the first: " + s.first_skipped.front();
}
const std::vector<uint64_t>& CorpusReader::file_hashes() const {
  return state_->hashes;
}

}  // namespace tfm
