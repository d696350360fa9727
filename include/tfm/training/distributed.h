// Data-parallel training over MPI (Open MPI from Debian). Every rank holds the whole model, samples
// its own batches, and the ranks average their gradients with one MPI_Allreduce over the flat
// gradient buffer, so every rank applies the same update. Rank 0 alone logs, evaluates and writes
// checkpoints.
//
// When the program was not started by mpirun there is one rank and every call here is a no-op: tfm
// behaves exactly as a single process, and Open MPI is not even loaded. Under mpirun, init() loads the
// MPI plugin (libtfm_mpi.so, built when Open MPI is installed; src/training/mpi_plugin.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfm::dist {

// Starts MPI when the process was launched by mpirun (Open MPI, MPICH or PMIx environment); call once
// from main() before anything else uses it. Throws IoError under mpirun when the plugin cannot be
// loaded (naming where it looked), Error when MPI fails to start; does nothing without mpirun.
void init(int* argc, char*** argv);
void finalize();
// Whether mpirun (Open MPI, MPICH or PMIx) started this process, from its environment; true before init.
bool launched_by_mpirun();

bool active();  // more than one rank
int rank();
int size();
bool is_root();
// Ranks on this machine (MPI_COMM_TYPE_SHARED); 1 without MPI. The default thread budget is
// cores / local_size().
int local_size();
std::string describe();  // "rank 0 of 2 (MPI)" or "single process"

// data (n) <- mean over ranks of data, in place (MPI_Allreduce with MPI_SUM, then / size).
void allreduce_mean(float* data, int64_t n);
double allreduce_mean(double value);
// data (n) on every rank <- data on `root`.
void broadcast(float* data, int64_t n, int root = 0);
void broadcast(uint64_t* data, int64_t n, int root = 0);
// Every rank's `local` words, concatenated in rank order (size() * local.size()), on every rank.
std::vector<uint64_t> allgather(const std::vector<uint64_t>& local);
void barrier();
// True on every rank when `flag` is true on any rank (a stop request seen by one rank stops all).
bool any(bool flag);
// Ends every rank of the job with `code` (MPI_Abort): an error on one rank must not leave the
// others waiting in a collective. Returns only when MPI is not active.
void abort(int code);

// Seconds spent inside allreduce_mean(float*) since start, for the overhead figures.
double allreduce_seconds();

}  // namespace tfm::dist
