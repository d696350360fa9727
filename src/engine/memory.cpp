#include "tfm/engine/memory.h"

#include <sanitizer/asan_interface.h>  // ASAN_(UN)POISON_MEMORY_REGION: no-ops without AddressSanitizer
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace tfm::memory {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugeBufferBytes = size_t{4} << 20;

struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<float*>> free_lists;  // by exact size in floats
  Stats stats;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: tensors may outlive static destructors
  return *p;
}

// The bytes of a pooled buffer of n floats that AddressSanitizer marks: whole 8-byte granules (its
// shadow's unit; a region's partial last granule is left as it was), within the 64-byte rounding of
// every buffer acquire() allocates.
size_t poisoned_bytes(size_t n) {
  return (n * sizeof(float) + 7) / 8 * 8;
}

}  // namespace

float* acquire(size_t n) {
  if (n == 0) n = 1;
  Pool& p = pool();
  const size_t bytes = n * sizeof(float);
  {
    std::lock_guard<std::mutex> lock(p.mu);
    auto it = p.free_lists.find(n);
    if (it != p.free_lists.end() && !it->second.empty()) {
      float* ptr = it->second.back();
      it->second.pop_back();
      ASAN_UNPOISON_MEMORY_REGION(ptr, poisoned_bytes(n));
      p.stats.reused++;
      p.stats.cached_bytes -= bytes;
      p.stats.live_bytes += bytes;
      if (p.stats.live_bytes > p.stats.peak_live_bytes) p.stats.peak_live_bytes = p.stats.live_bytes;
      return ptr;
    }
  }
  // Large buffers (activations, gradients, weights) are 2 MiB-aligned and asked to be backed by
  // transparent huge pages: a GEMM streaming a 100 MB operand then misses the TLB far less, and the
  // first step faults 512x fewer pages. (With THP in "madvise" mode, as on Debian, nothing else asks.)
  const bool huge = bytes >= kHugeBufferBytes;
  const size_t align = huge ? kHugePageBytes : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* ptr = std::aligned_alloc(align, rounded);
  if (!ptr) throw std::bad_alloc();
  if (huge) madvise(ptr, rounded, MADV_HUGEPAGE);  // advice only: failure leaves normal pages
  std::lock_guard<std::mutex> lock(p.mu);
  p.stats.fresh_allocs++;
  p.stats.live_bytes += bytes;
  if (p.stats.live_bytes > p.stats.peak_live_bytes) p.stats.peak_live_bytes = p.stats.live_bytes;
  return static_cast<float*>(ptr);
}

void release(float* ptr, size_t n) {
  if (!ptr) return;
  if (n == 0) n = 1;
  Pool& p = pool();
  // Under AddressSanitizer a pooled buffer is unreadable until acquire() hands it out again: a tensor's
  // storage used after its release is reported as it would be after free().
  ASAN_POISON_MEMORY_REGION(ptr, poisoned_bytes(n));
  std::lock_guard<std::mutex> lock(p.mu);
  p.free_lists[n].push_back(ptr);
  p.stats.live_bytes -= n * sizeof(float);
  p.stats.cached_bytes += n * sizeof(float);
}

Stats stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.stats;
}

void reset_peak() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.stats.peak_live_bytes = p.stats.live_bytes;
}

void restore_peak(size_t peak_live_bytes) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  p.stats.peak_live_bytes = std::max(peak_live_bytes, p.stats.live_bytes);
}

void trim() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  for (auto& [n, list] : p.free_lists)
    for (float* ptr : list) std::free(ptr);
  p.free_lists.clear();
  p.stats.cached_bytes = 0;
}

}  // namespace tfm::memory
