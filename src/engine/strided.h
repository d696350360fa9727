// Iteration over N strided operands that share one logical shape: the general (slow) path of
// elementwise ops, copies and broadcasting. Ops take a contiguous fast path first where they can.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace tfm::strided {

// Calls f(ptrs) for every index of `shape`, where ptrs[k] points at operand k's element:
// base[k] + sum_d index[d] * strides[k][d]. A stride of 0 broadcasts.
template <int N, class F>
void for_each(const std::vector<int64_t>& shape, std::array<const int64_t*, N> strides,
              std::array<float*, N> base, F&& f) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  for (int64_t d = 0; d < rank; ++d)
    if (shape[d] == 0) return;
  if (rank == 0) {
    f(base.data());
    return;
  }
  const int64_t inner = shape[rank - 1];
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = strides[k][rank - 1];
  std::vector<int64_t> index(rank - 1, 0);
  std::array<float*, N> row = base;
  std::array<float*, N> p;
  while (true) {
    p = row;
    for (int64_t i = 0; i < inner; ++i) {
      f(p.data());
      for (int k = 0; k < N; ++k) p[k] += inner_stride[k];
    }
    // Advance the outer index like an odometer.
    int64_t d = rank - 2;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        for (int k = 0; k < N; ++k) row[k] += strides[k][d];
        break;
      }
      for (int k = 0; k < N; ++k) row[k] -= strides[k][d] * (shape[d] - 1);
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// Strides of an operand of `shape` broadcast (NumPy rules, aligned right) to `out_shape`: 0 where the
// operand has size 1 or lacks the dimension.
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape,
                                              const std::vector<int64_t>& strides,
                                              const std::vector<int64_t>& out_shape) {
  std::vector<int64_t> out(out_shape.size(), 0);
  const size_t lead = out_shape.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) out[lead + i] = shape[i] == 1 ? 0 : strides[i];
  return out;
}

}  // namespace tfm::strided
