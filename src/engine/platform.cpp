#include "tfm/engine/platform.h"

#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tfm/engine/gemm.h"

// Defined by the installed CMake package in the programs that link tfm::tfm (cmake/tfmConfig.cmake.in):
// the prefix it was found in. A weak reference: null in a program without it (tfm's own, a build tree).
extern "C" const char* tfm_package_prefix() __attribute__((weak));

namespace tfm::platform {
namespace {
constexpr int64_t kStopRepeatNs = 1000000000;  // 1 s: see on_stop_signal
bool has_avx512() {
  return __builtin_cpu_supports("avx512f");
}

std::atomic<bool> g_stop{false};
std::atomic<int64_t> g_first_stop_ns{0};  // CLOCK_MONOTONIC of the first stop signal, 0 before it
bool g_hup_ignored = false;  // SIGHUP was ignored at start (nohup): it stays so, in tfm and its children

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// A stop signal asks the run to finish its step, save and exit. A second one a second or more later
// (a person pressing Ctrl-C again) ends the program at once: checkpoints are written atomically, so
// the last one saved stays whole. One sooner is the same request again, and only that: GNU timeout
// sends its signal to tfm and then to tfm's process group, twice within microseconds, and a run
// stopped that way had lost everything since its last checkpoint.
extern "C" void on_stop_signal(int sig) {
  const int64_t now = monotonic_ns();
  int64_t first = 0;
  if (g_first_stop_ns.compare_exchange_strong(first, now)) {
    g_stop.store(true);
    return;
  }
  if (now - first < kStopRepeatNs) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);  // a closed terminal or ssh session
  return set;
}
}  // namespace

void select_blas_kernels(char** argv) {
  // Both libraries read these variables once, when they load (before main), so a change needs a
  // fresh process image. TFM_REEXEC marks the second start, so this never loops.
  if (std::getenv("TFM_NO_REEXEC") || std::getenv("TFM_REEXEC")) return;
  std::string changed;
  if (!std::getenv("OPENBLAS_CORETYPE") && has_avx512()) {
    // OpenBLAS 0.3.21 picks Haswell kernels on AVX-512 AMD CPUs; SkylakeX ones are ~1.7x faster there.
    setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    changed += "OPENBLAS_CORETYPE=SkylakeX ";
  }
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    // Idle OpenMP threads spin briefly, then sleep. libgomp's default spins ~300k iterations, which
    // steals the cores whenever anything else runs; sleeping at once pays a futex wake-up for each of
    // the ~100 parallel regions of a step. Measured, small config, ms/step (quiet / with 2 busy
    // processes): passive 28-44 / 372-448, spin 10000: 24-25 / 276-300, active 58-80 / 1220-1268.
    setenv("GOMP_SPINCOUNT", "10000", 1);
    changed += "GOMP_SPINCOUNT=10000 ";
  }
  if (changed.empty()) return;
  changed.pop_back();
  setenv("TFM_REEXEC", changed.c_str(), 1);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on as we are (the variables then only affect children).
  unsetenv("TFM_REEXEC");
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "unknown CPU";
}

std::string blas_summary() {
  std::ostringstream os;
  os << "OpenBLAS " << blas_core_name() << " kernels, " << blas_threads() << " thread(s)";
  if (const char* re = std::getenv("TFM_REEXEC"))
    os << " (restarted with " << re << "; TFM_NO_REEXEC=1 keeps the defaults)";
  if (const char* core = std::getenv("OPENBLAS_CORETYPE"); core && has_avx512()) {
    const std::string c(core);
    if (c != "SkylakeX" && c != "Cooperlake" && c != "SapphireRapids")
      os << " (OPENBLAS_CORETYPE=" << c
         << " from the environment; this CPU has AVX-512: unset it to let tfm use the "
         << "~1.7x faster SkylakeX kernels)";
  }
  return os.str();
}

std::string gemm_summary() {
  const GemmBackend b = gemm_backend();
  std::string s =
      std::string("matrix products ") + precision_name(gemm_precision()) + " on " + gemm_backend_name(b);
  if (b == GemmBackend::OneDnn)
    s +=
        " (" + onednn_version() +
        (gemm_precision() != Precision::Bf16 ? ", dnnl_sgemm)"
         : onednn_bf16_matmul_available()
             ? ", bf16 matmul)"
             : ": no bf16 matmul on this CPU, which lacks AVX-512; bf16 emulated: sgemm on rounded operands, "
               "the same numbers as bf16 kernels and slower than fp32, which skips the rounding: "
               "train.precision \"fp32\" is faster here)");
  else if (gemm_precision() == Precision::Bf16)
    s += " (bf16 emulated: sgemm on rounded operands, slower than fp32; train.gemm_backend \"onednn\" runs "
         "bf16 kernels on a CPU with AVX-512)";
  if (const char* env = std::getenv("TFM_GEMM_BACKEND")) s += std::string(" (TFM_GEMM_BACKEND=") + env + ")";
  return s;
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int configure_threads(int requested) {
  int n = requested > 0 ? requested : available_cores();
  if (n <= 0) n = 1;
  set_blas_threads(n);
  omp_set_num_threads(n);
  return n;
}

const std::atomic<bool>* stop_on_signals() {
  static const bool installed = [] {
    const sigset_t set = stop_signal_set();
    // Threads inherit their creator's mask: blocking here covers every thread started from now on.
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    // OpenMP's threads that already exist: its pool is at most the largest team run so far.
#pragma omp parallel num_threads(std::max(omp_get_max_threads(), omp_get_num_procs()))
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    struct sigaction hup {};
    ::sigaction(SIGHUP, nullptr, &hup);
    g_hup_ignored = hup.sa_handler == SIG_IGN;  // `nohup tfm train ...` asked to outlive the terminal
    if (!g_hup_ignored) ::sigaction(SIGHUP, &sa, nullptr);
    // A closed stdout (`tfm train ... | head`) fails the console's writes (EPIPE) instead of killing
    // the run: train.log and the checkpoints go on.
    ::signal(SIGPIPE, SIG_IGN);
    // The one thread that takes them (it computes nothing). Any other thread a library started before
    // this call may take one too, which is harmless unless it runs oneDNN's kernels.
    std::thread([set] {
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      for (;;) ::pause();
    }).detach();
    return true;
  }();
  (void)installed;
  return &g_stop;
}

int run_program(const std::vector<std::string>& argv, bool quiet) {
  if (argv.empty()) return -1;
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults = stop_signal_set();
  sigemptyset(&none);
  // Caught signals are reset by exec anyway; ignored ones are inherited: SIGPIPE is only tfm's choice.
  sigaddset(&defaults, SIGPIPE);
  if (g_hup_ignored) sigdelset(&defaults, SIGHUP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  // Each argument is one argv entry, never parsed by a shell: quotes, $(), backticks, spaces and
  // newlines in a path reach the program as they are.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string program_directory() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

std::string package_prefix() {
  const char* prefix = tfm_package_prefix ? tfm_package_prefix() : nullptr;
  return prefix ? prefix : "";
}

std::vector<std::string> data_directories(const std::string& subdir, const std::string& source_dir) {
  std::vector<std::string> dirs;
  const auto add = [&dirs](const std::string& dir) {
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
  };
  if (const std::string bin = program_directory(); !bin.empty())
    add((std::filesystem::path(bin).parent_path() / "share" / "tfm" / subdir).string());
  if (const std::string prefix = package_prefix(); !prefix.empty())
    add((std::filesystem::path(prefix) / "share" / "tfm" / subdir).string());
  add(source_dir);
  return dirs;
}

std::string shell_quote(const std::string& arg) {
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace tfm::platform
