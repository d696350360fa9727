// libtfm_mpi.so: tfm's data-parallel collectives on Open MPI, loaded by tfm::dist::init() when mpirun
// started the process (src/training/mpi_plugin.h says why it is apart). It holds no tfm code: each
// function is one MPI call on MPI_COMM_WORLD, and tfm::dist turns a failed status into its error.
#include <mpi.h>

#include "mpi_plugin.h"

namespace {

int init(int* argc, char*** argv, int* rank, int* size, int* local_size) {
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return rc;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  MPI_Comm node;
  rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) return rc;
  MPI_Comm_size(node, local_size);
  return MPI_Comm_free(&node);
}

int finalize() {
  return MPI_Finalize();
}

int allreduce_sum_float(float* data, int count) {
  return MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int allreduce_sum_double(double* value) {
  return MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

int allreduce_or(int* flag) {
  return MPI_Allreduce(MPI_IN_PLACE, flag, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
}

int broadcast_float(float* data, int count, int root) {
  return MPI_Bcast(data, count, MPI_FLOAT, root, MPI_COMM_WORLD);
}

int broadcast_u64(uint64_t* data, int count, int root) {
  return MPI_Bcast(data, count, MPI_UINT64_T, root, MPI_COMM_WORLD);
}

int allgather_u64(const uint64_t* local, int count, uint64_t* all) {
  return MPI_Allgather(local, count, MPI_UINT64_T, all, count, MPI_UINT64_T, MPI_COMM_WORLD);
}

int barrier() {
  return MPI_Barrier(MPI_COMM_WORLD);
}

void abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
}

constexpr TfmMpiPlugin kPlugin = {kTfmMpiPluginVersion,
                                  init,
                                  finalize,
                                  allreduce_sum_float,
                                  allreduce_sum_double,
                                  allreduce_or,
                                  broadcast_float,
                                  broadcast_u64,
                                  allgather_u64,
                                  barrier,
                                  abort};

}  // namespace

extern "C" __attribute__((visibility("default"))) const TfmMpiPlugin* tfm_mpi_plugin() {
  return &kPlugin;
}
