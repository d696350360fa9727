#include "tfm/training/distributed.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "tfm/engine/error.h"

#ifdef TFM_HAVE_MPI
#include <mpi.h>
#endif

namespace tfm::dist {
namespace {
int g_rank = 0;
int g_size = 1;
int g_local_size = 1;
bool g_mpi = false;
double g_allreduce_seconds = 0.0;

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

#ifdef TFM_HAVE_MPI
void check(int rc, const char* call) {
  TFM_CHECK(rc == MPI_SUCCESS, "dist", call, " failed with MPI error ", rc);
}
#endif
}  // namespace

void init(int* argc, char*** argv) {
#ifdef TFM_HAVE_MPI
  if (g_mpi || !launched_by_mpirun()) return;
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  MPI_Comm_size(node, &g_local_size);
  MPI_Comm_free(&node);
  g_mpi = true;
#else
  (void)argc;
  (void)argv;
#endif
}

void finalize() {
#ifdef TFM_HAVE_MPI
  if (g_mpi) MPI_Finalize();
#endif
  g_mpi = false;
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
#ifdef TFM_HAVE_MPI
  const auto t0 = std::chrono::steady_clock::now();
  // MPI counts are int: reduce in chunks so any parameter count works.
  constexpr int64_t kChunk = int64_t{1} << 30;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int count = static_cast<int>(std::min(kChunk, n - start));
    check(MPI_Allreduce(MPI_IN_PLACE, data + start, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce");
  }
  const float inv = 1.0f / static_cast<float>(g_size);
  for (int64_t i = 0; i < n; ++i) data[i] *= inv;
  g_allreduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
#endif
}

double allreduce_mean(double value) {
  if (!active()) return value;
#ifdef TFM_HAVE_MPI
  double sum = 0.0;
  check(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  return sum / g_size;
#else
  return value;
#endif
}

void broadcast(float* data, int64_t n, int root) {
  if (!active()) return;
#ifdef TFM_HAVE_MPI
  check(MPI_Bcast(data, static_cast<int>(n), MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Bcast");
#else
  (void)data, (void)n, (void)root;
#endif
}

void broadcast(uint64_t* data, int64_t n, int root) {
  if (!active()) return;
#ifdef TFM_HAVE_MPI
  check(MPI_Bcast(data, static_cast<int>(n), MPI_UINT64_T, root, MPI_COMM_WORLD), "MPI_Bcast");
#else
  (void)data, (void)n, (void)root;
#endif
}

std::vector<uint64_t> allgather(const std::vector<uint64_t>& local) {
  if (!active()) return local;
  std::vector<uint64_t> all(local.size() * g_size);
#ifdef TFM_HAVE_MPI
  check(MPI_Allgather(local.data(), static_cast<int>(local.size()), MPI_UINT64_T, all.data(),
                      static_cast<int>(local.size()), MPI_UINT64_T, MPI_COMM_WORLD),
        "MPI_Allgather");
#endif
  return all;
}

void barrier() {
#ifdef TFM_HAVE_MPI
  if (active()) MPI_Barrier(MPI_COMM_WORLD);
#endif
}

bool any(bool flag) {
  if (!active()) return flag;
#ifdef TFM_HAVE_MPI
  int local = flag ? 1 : 0, global = 0;
  check(MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD), "MPI_Allreduce");
  return global != 0;
#else
  return flag;
#endif
}

void abort(int code) {
#ifdef TFM_HAVE_MPI
  if (g_mpi) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)code;
#endif
}

double allreduce_seconds() {
  return g_allreduce_seconds;
}

}  // namespace tfm::dist
