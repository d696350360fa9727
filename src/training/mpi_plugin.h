// The C interface between tfm::dist (distributed.cpp) and the MPI plugin, libtfm_mpi.so
// (src/plugins/mpi.cpp), the one part of tfm that links Open MPI. dist::init() loads the plugin only
// when the process was started by mpirun, so that every other start of tfm (and of a program linking
// the library) does not load and relocate Open MPI's libraries (hwloc, libevent, PMIx): a quarter of an
// empty command's start-up in the dynamic loader.
//
// Every function returns MPI's status (0: MPI_SUCCESS) but abort, which does not return.
#pragma once
#include <cstdint>

extern "C" {

// Raised when a field changes: a plugin built from other sources is refused, not called.
constexpr int kTfmMpiPluginVersion = 1;

struct TfmMpiPlugin {
  int version;  // kTfmMpiPluginVersion
  // MPI_Init_thread (funneled), then this process's rank, the world's size and the ranks on this machine.
  int (*init)(int* argc, char*** argv, int* rank, int* size, int* local_size);
  int (*finalize)();
  int (*allreduce_sum_float)(float* data, int count);  // in place
  int (*allreduce_sum_double)(double* value);          // one value, in place
  int (*allreduce_or)(int* flag);                      // one value, in place: logical or
  int (*broadcast_float)(float* data, int count, int root);
  int (*broadcast_u64)(uint64_t* data, int count, int root);
  int (*allgather_u64)(const uint64_t* local, int count, uint64_t* all);  // all: count per rank
  int (*barrier)();
  void (*abort)(int code);
};

// The symbol the plugin exports; dist::init() looks it up by this name.
const TfmMpiPlugin* tfm_mpi_plugin();
}
