#include "tfm/training/distributed.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "mpi_plugin.h"
#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"

namespace tfm::dist {
namespace {
int g_rank = 0;
int g_size = 1;
int g_local_size = 1;
const TfmMpiPlugin* g_mpi = nullptr;  // loaded by init() under mpirun
double g_allreduce_seconds = 0.0;

void check(int rc, const char* call) {
  TFM_CHECK(rc == 0, "dist", call, " failed with MPI error ", rc);
}

// libtfm_mpi.so beside the running program (a build tree), else in PREFIX/lib/tfm of the prefix the
// program is installed in (PREFIX/bin), else in that of the installed package a program of another project
// linked (platform::package_prefix), else in the directory the build installs it to: its table of MPI
// calls, or an error naming every place looked at.
const TfmMpiPlugin* load_mpi_plugin() {
  static constexpr const char* kFile = "libtfm_mpi.so";
  std::vector<std::string> candidates;
  const auto add = [&candidates](const std::filesystem::path& dir) {
    const std::string path = (dir / kFile).string();
    if (std::find(candidates.begin(), candidates.end(), path) == candidates.end()) candidates.push_back(path);
  };
  const std::filesystem::path bin = platform::program_directory();
  if (!bin.empty()) {
    add(bin);
    add(bin.parent_path() / TFM_PLUGIN_LIBDIR / "tfm");
  }
  if (const std::string prefix = platform::package_prefix(); !prefix.empty())
    add(std::filesystem::path(prefix) / TFM_PLUGIN_LIBDIR / "tfm");
  add(TFM_PLUGIN_INSTALL_DIR);
  std::string tried;
  bool found = false;  // a file, though it did not load
  std::error_code ec;
  for (const std::string& path : candidates) {
    if (!std::filesystem::exists(path, ec)) {
      tried += "\n  " + path + ": no such file";
      continue;
    }
    found = true;
    // RTLD_GLOBAL: Open MPI opens its own components (dlopen) and they look up libmpi's symbols.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      tried += "\n  " + path + ": " + dlerror();
      continue;
    }
    using Entry = const TfmMpiPlugin* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "tfm_mpi_plugin"));
    const TfmMpiPlugin* plugin = entry ? entry() : nullptr;
    if (plugin && plugin->version == kTfmMpiPluginVersion) return plugin;
    tried += "\n  " + path + ": not a tfm MPI plugin of this version (rebuild tfm)";
  }
  // Building it again helps only when it was never built; a plugin that is there but does not load needs
  // what its line says.
  throw IoError("dist: tfm was started by mpirun, but its MPI plugin libtfm_mpi.so could not be loaded" +
                std::string(found ? ":"
                                  : " (it is built when Open MPI is installed: apt-get install "
                                    "libopenmpi-dev, then build and install tfm again); looked at:") +
                tried);
}
}  // namespace

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

void init(int* argc, char*** argv) {
  if (g_mpi || !launched_by_mpirun()) return;
  const TfmMpiPlugin* mpi = load_mpi_plugin();
  check(mpi->init(argc, argv, &g_rank, &g_size, &g_local_size), "MPI_Init_thread");
  g_mpi = mpi;
}

void finalize() {
  if (g_mpi) g_mpi->finalize();
  g_mpi = nullptr;
  g_rank = 0;
  g_size = 1;
  g_local_size = 1;
}

bool active() {
  return g_size > 1;
}
int rank() {
  return g_rank;
}
int size() {
  return g_size;
}
bool is_root() {
  return g_rank == 0;
}
int local_size() {
  return g_local_size;
}
std::string describe() {
  if (!g_mpi) return "single process";
  return "rank " + std::to_string(g_rank) + " of " + std::to_string(g_size) + " (MPI)";
}

void allreduce_mean(float* data, int64_t n) {
  if (!active()) return;
  const auto t0 = std::chrono::steady_clock::now();
  // MPI counts are int: reduce in chunks so any parameter count works.
  constexpr int64_t kChunk = int64_t{1} << 30;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int count = static_cast<int>(std::min(kChunk, n - start));
    check(g_mpi->allreduce_sum_float(data + start, count), "MPI_Allreduce");
  }
  const float inv = 1.0f / static_cast<float>(g_size);
  for (int64_t i = 0; i < n; ++i) data[i] *= inv;
  g_allreduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double allreduce_mean(double value) {
  if (!active()) return value;
  check(g_mpi->allreduce_sum_double(&value), "MPI_Allreduce");
  return value / g_size;
}

void broadcast(float* data, int64_t n, int root) {
  if (!active()) return;
  check(g_mpi->broadcast_float(data, static_cast<int>(n), root), "MPI_Bcast");
}

void broadcast(uint64_t* data, int64_t n, int root) {
  if (!active()) return;
  check(g_mpi->broadcast_u64(data, static_cast<int>(n), root), "MPI_Bcast");
}

std::vector<uint64_t> allgather(const std::vector<uint64_t>& local) {
  if (!active()) return local;
  std::vector<uint64_t> all(local.size() * g_size);
  check(g_mpi->allgather_u64(local.data(), static_cast<int>(local.size()), all.data()), "MPI_Allgather");
  return all;
}

void barrier() {
  if (active()) check(g_mpi->barrier(), "MPI_Barrier");
}

bool any(bool flag) {
  if (!active()) return flag;
  int global = flag ? 1 : 0;
  check(g_mpi->allreduce_or(&global), "MPI_Allreduce");
  return global != 0;
}

void abort(int code) {
  if (g_mpi) g_mpi->abort(code);
}

double allreduce_seconds() {
  return g_allreduce_seconds;
}

}  // namespace tfm::dist
