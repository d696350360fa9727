// A caching allocator for tensor storage. Training steps have the same shapes every step, so buffers
// freed in one step are handed out again, by exact size, in the next: in steady state a step asks the
// OS for nothing. `stats().fresh_allocs` counts the requests that could not be served from the cache.
#pragma once
#include <cstddef>

namespace tfm::memory {

// A 64-byte-aligned buffer of n floats (uninitialised).
float* acquire(size_t n);
// Returns a buffer from acquire(n) to the cache.
void release(float* p, size_t n);

struct Stats {
  size_t fresh_allocs = 0;  // buffers obtained from the OS
  size_t reused = 0;        // buffers served from the cache
  size_t live_bytes = 0;    // bytes handed out and not yet released
  size_t peak_live_bytes = 0;
  size_t cached_bytes = 0;  // bytes held in the cache for reuse
};
Stats stats();
// Starts a new peak: peak_live_bytes = live_bytes (to measure the peak of one stretch of work).
void reset_peak();
// Sets the peak back to `peak_live_bytes` (or to the bytes live now, if more): a stretch of work that
// is not the caller's to count, such as timing the GEMM, leaves the peak as it found it.
void restore_peak(size_t peak_live_bytes);
// Gives every cached buffer back to the OS.
void trim();

}  // namespace tfm::memory
