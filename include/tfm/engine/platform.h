// Start-up decisions about the machine: which OpenBLAS kernels to use, how many threads, which GEMM.
#pragma once
#include <atomic>
#include <string>
#include <vector>

namespace tfm::platform {

// Prepares the environment that OpenBLAS and OpenMP read once, when they load (before main), by
// re-executing the program once with, each only when unset:
//  - OPENBLAS_CORETYPE=SkylakeX on AVX-512 CPUs: OpenBLAS 0.3.21 picks its Haswell kernels on AVX-512
//    AMD CPUs, and its SkylakeX kernels are ~1.7x faster there;
//  - GOMP_SPINCOUNT=10000: idle OpenMP threads spin briefly, then sleep, rather than spinning long
//    enough to steal the cores from anything else running (unless OMP_WAIT_POLICY is set).
// TFM_NO_REEXEC=1 opts out. Returns when no re-exec happens.
void select_blas_kernels(char** argv);

// The CPU's model name ("AMD EPYC 9R14 96-Core Processor", from /proc/cpuinfo), for reports that say
// which machine a figure came from; "unknown CPU" when it cannot be read.
std::string cpu_name();

// One line for the start-up log: OpenBLAS core, threads, and why that core was chosen.
std::string blas_summary();

// One line for the start-up log: the GEMM backend and precision in use, and why.
std::string gemm_summary();

// The cores this process may run on: its CPU affinity mask (taskset, cgroup cpusets, Slurm), else all of
// the machine's.
int available_cores();
// Threads to use: `requested` when > 0, else available_cores(). Sets OpenBLAS and OpenMP to it.
int configure_threads(int requested);

// Ctrl-C, SIGTERM and SIGHUP (a closed terminal; not when ignored at start, as nohup does) set the
// returned flag (training finishes its step, checkpoints and returns); a second one ends the program.
// SIGPIPE is ignored: a closed stdout fails writes to it (EPIPE) and training goes on. The signals are taken
// by a thread of their own and blocked in this thread and in OpenMP's, and so in every thread these start
// later: oneDNN 2.6's JIT sgemm kernels point rsp into the heap while they run (a bug of that release, fixed
// in later ones), so a handler run on a computing thread writes its frame over the heap. Idempotent; call
// before training starts.
const std::atomic<bool>* stop_on_signals();

// Runs the program argv[0] (an absolute path) with the arguments argv[1..], no shell in between, and
// with the signals a default process has: a child of a thread that blocks SIGINT would otherwise
// ignore Ctrl-C. `quiet` sends its output to /dev/null. Returns the exit status, or -1 when it could not
// start or was killed by a signal.
int run_program(const std::vector<std::string>& argv, bool quiet = false);

// The directory of the running program's file (/proc/self/exe), "" when it cannot be read: where a build
// tree keeps tfm's other programs and plugins beside it, and PREFIX/bin in an install.
std::string program_directory();

// The prefix of the installed tfm package the program was built against, "" when it was not: the CMake
// package (find_package(tfm)) compiles a definition of tfm_package_prefix() into every target linking
// tfm::tfm, holding the prefix it found itself in at configure time (PREFIX of `cmake --install BUILD
// --prefix PREFIX`, whatever prefix the build was configured with). tfm's own programs, tests and
// examples in a build tree have none. Where a program of another project finds tfm's installed files.
std::string package_prefix();

// Where tfm's data files of `subdir` (a path under share/tfm: "board", "tokenizers/gpt2") may be, in
// the order to try: PREFIX/share/tfm/<subdir> of the prefix the running program is installed in
// (PREFIX/bin/tfm, from `cmake --install`), the same under package_prefix() (a program of another
// project linking the installed library, wherever it lives), then `source_dir`, where the source tree
// of this build keeps them.
std::vector<std::string> data_directories(const std::string& subdir, const std::string& source_dir);

// `arg` quoted for a POSIX shell ('it'\''s'), for printing a command a user may copy; never executed.
std::string shell_quote(const std::string& arg);

}  // namespace tfm::platform
