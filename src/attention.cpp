// Fused scaled-dot-product attention: the kernel pair over raw floats, then the op beside its backward.
// Legend: B batch, Tq/Tk query/key length, H/Hkv query/key-value heads, Dk/Dv per-head widths.
#include "tfm/attention.h"

#include <algorithm>
#include <cmath>

#include "tfm/gemm.h"
#include "tfm/kernels.h"
#include "vecmath.h"

#include <omp.h>

namespace tfm {
namespace kernels {
namespace {

// Keys visible to query row i of sequence b: a prefix [0, n) of the keys, since both the causal mask
// and key padding hide a suffix.
int64_t visible_keys(int64_t i, int64_t b, const int64_t* key_lengths, bool causal, const AttentionDims& d) {
  int64_t n = d.Tk;
  if (causal) n = std::min(n, i + d.Tk - d.Tq + 1);
  if (key_lengths) n = std::min(n, key_lengths[b]);
  return std::max<int64_t>(n, 0);
}

// Queries are processed in blocks of rows: with a causal mask, a block only needs the keys its last
// row sees, which skips the masked upper triangle (about 3/8 of the work at T = 4 blocks).
constexpr int64_t kRowBlock = kAttentionRowBlock;

// Threads over (batch, head) pairs, each GEMM on one thread (OpenBLAS's OpenMP build runs GEMMs
// called inside a parallel region single-threaded), beat letting OpenBLAS thread each small GEMM:
// at T 256, Dk 64, B 16, H 6 (best of 25, 2 cores) forward 35 -> 21 ms, backward 47 -> 24.5 ms. At
// the baby config's T 64, Dk 32 the two were equal within noise on a loaded machine.
bool parallel_worth_it(const AttentionDims& d) {
  return d.B * d.Hkv > 1 && d.Tq * d.Tk * std::max(d.Dk, d.Dv) >= 8192;
}

}  // namespace

int attention_scratch_threads() { return omp_get_max_threads(); }

namespace {

// S = Q K^T / sqrt(Dk) for a block of rows over the first n keys, then the softmax of each row over
// its visible keys: the forward writes the row statistics (max, 1 / sum), the backward reuses them,
// so both produce the same P bit for bit. Masked keys, and fully masked rows, get P = 0.
// stats_in: the saved statistics (backward), or null to compute them into stats_out (forward).
void block_probabilities(float* p, float* stats_out, const float* stats_in, const float* qb, const float* kg,
                         int64_t rows, int64_t n, int64_t i0, int64_t b, const int64_t* key_lengths, bool causal,
                         const AttentionDims& d) {
  const int64_t ldq = d.H * d.Dk, ldk = d.Hkv * d.Dk;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.Dk));
  gemm(false, true, rows, n, d.Dk, scale, qb, ldq, kg, ldk, 0.0f, p, d.Tk);
  for (int64_t i = 0; i < rows; ++i) {
    float* row = p + i * d.Tk;
    const int64_t ni = visible_keys(i0 + i, b, key_lengths, causal, d);
    float mx = -INFINITY, inv = 0.0f;
    if (stats_in) {
      mx = stats_in[2 * i];
      inv = stats_in[2 * i + 1];
    } else {
      for (int64_t j = 0; j < ni; ++j) mx = std::max(mx, row[j]);
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < ni; ++j) {
      row[j] = expf(row[j] - mx);
      sum += row[j];
    }
    if (!stats_in) {
      inv = ni > 0 ? 1.0f / sum : 0.0f;
      stats_out[2 * i] = mx;
      stats_out[2 * i + 1] = inv;
    }
#pragma omp simd
    for (int64_t j = 0; j < ni; ++j) row[j] *= inv;
    std::fill(row + ni, row + d.Tk, 0.0f);
  }
}

}  // namespace

void attention_forward(float* out, float* stats, float* probs, const float* q, const float* k, const float* v,
                       const float* keep, float* scratch, const int64_t* key_lengths, bool causal,
                       const AttentionDims& d) {
  const int64_t group = d.H / d.Hkv;
  const int64_t ldq = d.H * d.Dk, ldv = d.Hkv * d.Dv, ldo = d.H * d.Dv;
  // (batch, head) pairs are independent: split them over the threads, each with its own scratch.
#pragma omp parallel for schedule(static) if (parallel_worth_it(d))
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const int64_t b = bh / d.H, h = bh % d.H, g = h / group;
    const int64_t block = std::min(kRowBlock, d.Tq) * d.Tk;  // floats of one (rows, Tk) block
    float* p_t = scratch + omp_get_thread_num() * 2 * block;   // (rows, Tk): P of a block
    float* pd_t = p_t + block;                                // (rows, Tk): P o M
    const float* kg = k + b * d.k_batch_stride + g * d.Dk;  // (Tk, Dk), ld Hkv*Dk
    const float* vg = v + b * d.v_batch_stride + g * d.Dv;  // (Tk, Dv), ld Hkv*Dv
    for (int64_t i0 = 0; i0 < d.Tq; i0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, d.Tq - i0);
      const int64_t n = visible_keys(i0 + rows - 1, b, key_lengths, causal, d);  // the block's widest row
      const int64_t at = (b * d.H + h) * d.Tq + i0;                             // first row of the block
      const float* qb = q + b * d.q_batch_stride + i0 * ldq + h * d.Dk;         // (rows, Dk), ld H*Dk
      float* ob = out + (b * d.Tq + i0) * ldo + h * d.Dv;                       // (rows, Dv), ld H*Dv
      float* p = probs ? probs + at * d.Tk : p_t;                               // (rows, Tk)
      block_probabilities(p, stats + 2 * at, nullptr, qb, kg, rows, n, i0, b, key_lengths, causal, d);
      if (n == 0) {  // no key visible to the block: zero output
        for (int64_t i = 0; i < rows; ++i) std::fill_n(ob + i * ldo, d.Dv, 0.0f);
        continue;
      }
      // O = (P o M) V.
      const float* used = p;
      if (keep) {
        const float* m = keep + at * d.Tk;
        for (int64_t i = 0; i < rows * d.Tk; ++i) pd_t[i] = p[i] * m[i];
        used = pd_t;
      }
      gemm(false, false, rows, d.Dv, n, 1.0f, used, d.Tk, vg, ldv, 0.0f, ob, ldo);
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* stats, const float* keep, float* scratch,
                        const int64_t* key_lengths, bool causal, const AttentionDims& d) {
  const int64_t group = d.H / d.Hkv;
  const int64_t ldq = d.H * d.Dk, ldk = d.Hkv * d.Dk, ldv = d.Hkv * d.Dv, ldo = d.H * d.Dv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.Dk));
  // Parallel over (batch, kv head): the query heads sharing a kv head add into the same dK/dV
  // block, so they run one after another in the same thread.
#pragma omp parallel for schedule(static) if (parallel_worth_it(d))
  for (int64_t bg = 0; bg < d.B * d.Hkv; ++bg) {
    const int64_t b = bg / d.Hkv, g = bg % d.Hkv;
    const int64_t block = std::min(kRowBlock, d.Tq) * d.Tk;  // floats of one (rows, Tk) block
    float* p = scratch + omp_get_thread_num() * 3 * block;     // (rows, Tk): P, recomputed
    float* dp = p + block;                                    // (rows, Tk): dP, then dS in place
    float* pd = dp + block;                                   // (rows, Tk): P o M with dropout
    const float* kg = k + b * d.k_batch_stride + g * d.Dk;        // (Tk, Dk)
    const float* vg = v + b * d.v_batch_stride + g * d.Dv;        // (Tk, Dv)
    float* dkg = dk ? dk + b * d.Tk * ldk + g * d.Dk : nullptr;   // (Tk, Dk), ld Hkv*Dk
    float* dvg = dv ? dv + b * d.Tk * ldv + g * d.Dv : nullptr;   // (Tk, Dv), ld Hkv*Dv
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t i0 = 0; i0 < d.Tq; i0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, d.Tq - i0);
        const int64_t n = visible_keys(i0 + rows - 1, b, key_lengths, causal, d);
        if (n == 0) continue;  // P is zero on the whole block: no gradient
        const int64_t at = (b * d.H + h) * d.Tq + i0;
        const float* m = keep ? keep + at * d.Tk : nullptr;
        const float* qb = q + b * d.q_batch_stride + i0 * ldq + h * d.Dk;   // (rows, Dk)
        const float* dob = dout + (b * d.Tq + i0) * ldo + h * d.Dv;         // (rows, Dv), ld H*Dv
        block_probabilities(p, nullptr, stats + 2 * at, qb, kg, rows, n, i0, b, key_lengths, causal, d);
        if (dvg) {  // dV (n, Dv) += Pd^T dO
          const float* used = p;
          if (m) {
            for (int64_t i = 0; i < rows * d.Tk; ++i) pd[i] = p[i] * m[i];
            used = pd;
          }
          gemm(true, false, n, d.Dv, rows, 1.0f, used, d.Tk, dob, ldo, 1.0f, dvg, ldv);
        }
        if (!dq && !dkg) continue;
        // dP = (dO V^T) o M;  dS = P o (dP - rowsum(dP o P))  (softmax backward, in place).
        gemm(false, true, rows, n, d.Dv, 1.0f, dob, ldo, vg, ldv, 0.0f, dp, d.Tk);
        for (int64_t i = 0; i < rows; ++i) {
          float* row = dp + i * d.Tk;
          const float* pr = p + i * d.Tk;
          if (m)
            for (int64_t j = 0; j < n; ++j) row[j] *= m[i * d.Tk + j];
          float dot = 0.0f;
          for (int64_t j = 0; j < n; ++j) dot += row[j] * pr[j];
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) row[j] = pr[j] * (row[j] - dot);
        }
        if (dq)  // dQ (rows, Dk) += dS K / sqrt(Dk)
          gemm(false, false, rows, d.Dk, n, scale, dp, d.Tk, kg, ldk, 1.0f, dq + (b * d.Tq + i0) * ldq + h * d.Dk, ldq);
        if (dkg)  // dK (n, Dk) += dS^T Q / sqrt(Dk)
          gemm(true, false, n, d.Dk, rows, scale, dp, d.Tk, qb, ldq, 1.0f, dkg, ldk);
      }
    }
  }
}

}  // namespace kernels

namespace {

// t as (B, T, W) with packed rows: t itself when its last two dims are contiguous, else a copy.
Tensor packed_rows(const Tensor& t) {
  const bool ok = t.strides()[2] == 1 && (t.size(1) <= 1 || t.strides()[1] == t.size(2));
  return ok ? t : contiguous_values(t);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& opt, Tensor* probabilities) {
  const char* fn = "scaled_dot_product_attention";
  TFM_CHECK(q_in.dim() == 3 && k_in.dim() == 3 && v_in.dim() == 3, fn, "expected q (B, Tq, H*Dk), k (B, Tk, Hkv*Dk), ",
            "v (B, Tk, Hkv*Dv), got ", shape_str(q_in.shape()), ", ", shape_str(k_in.shape()), ", ",
            shape_str(v_in.shape()));
  kernels::AttentionDims d;
  d.B = q_in.size(0);
  d.Tq = q_in.size(1);
  d.Tk = k_in.size(1);
  d.H = opt.n_heads;
  d.Hkv = opt.n_kv_heads ? opt.n_kv_heads : opt.n_heads;
  TFM_CHECK(d.H > 0 && d.Hkv > 0 && d.H % d.Hkv == 0, fn, "n_heads ", d.H, " must be a multiple of n_kv_heads ", d.Hkv);
  TFM_CHECK(q_in.size(2) % d.H == 0, fn, "q ", shape_str(q_in.shape()), " width is not a multiple of ", d.H, " heads");
  d.Dk = q_in.size(2) / d.H;
  TFM_CHECK(v_in.size(2) % d.Hkv == 0, fn, "v ", shape_str(v_in.shape()), " width is not a multiple of ", d.Hkv,
            " kv heads");
  d.Dv = v_in.size(2) / d.Hkv;
  TFM_CHECK(k_in.size(0) == d.B && v_in.size(0) == d.B && v_in.size(1) == d.Tk && k_in.size(2) == d.Hkv * d.Dk, fn,
            "q ", shape_str(q_in.shape()), " with ", d.H, " heads needs k (", d.B, ", Tk, ", d.Hkv * d.Dk,
            ") and v (", d.B, ", Tk, Hkv*Dv), got k ", shape_str(k_in.shape()), ", v ", shape_str(v_in.shape()));
  if (!opt.key_lengths.empty()) {
    TFM_CHECK(static_cast<int64_t>(opt.key_lengths.size()) == d.B, fn, opt.key_lengths.size(),
              " key lengths for batch ", d.B);
    for (int64_t len : opt.key_lengths)
      TFM_CHECK(len >= 0 && len <= d.Tk, fn, "key length ", len, " outside [0, ", d.Tk, "]");
  }
  const bool drop = opt.training && opt.dropout > 0.0f;
  TFM_CHECK(!drop || (opt.rng && opt.dropout < 1.0f), fn, "dropout ", opt.dropout, " needs an Rng and p < 1");

  const Tensor q = packed_rows(q_in), k = packed_rows(k_in), v = packed_rows(v_in);
  d.q_batch_stride = q.strides()[0];
  d.k_batch_stride = k.strides()[0];
  d.v_batch_stride = v.strides()[0];
  Tensor out = Tensor::empty({d.B, d.Tq, d.H * d.Dv});  // (B, Tq, H*Dv)
  // Only the softmax's row statistics are saved (max and 1/sum per row, (B, H, Tq, 2)): the backward
  // recomputes P block by block, which costs one more Q K^T GEMM but not B*H*Tq*Tk floats.
  Tensor stats = Tensor::empty({d.B, d.H, d.Tq, 2});
  Tensor probs = probabilities ? Tensor::empty({d.B, d.H, d.Tq, d.Tk}) : Tensor();  // (B, H, Tq, Tk)
  Tensor keep;                                                                     // (B, H, Tq, Tk): 0 or 1/(1-p)
  if (drop) {
    // The dropout op's mask for a (B, H, Tq, Tk) tensor from the same generator, so the composed
    // form (dropout of the probabilities) matches.
    keep = Tensor::empty({d.B, d.H, d.Tq, d.Tk});
    kernels::dropout(keep.data(), nullptr, keep.numel(), opt.dropout, opt.rng->next_u64(), false);
  }
  const int64_t threads = kernels::attention_scratch_threads();
  Tensor scratch = Tensor::empty({threads, 2, std::min(kernels::kAttentionRowBlock, d.Tq), d.Tk});
  kernels::attention_forward(out.data(), stats.data(), probs.defined() ? probs.data() : nullptr, q.data(), k.data(),
                             v.data(), drop ? keep.data() : nullptr, scratch.data(),
                             opt.key_lengths.empty() ? nullptr : opt.key_lengths.data(), opt.causal, d);
  record(out, "scaled_dot_product_attention", {q_in, k_in, v_in},
         [rq = grad_ref(q_in), rk = grad_ref(k_in), rv = grad_ref(v_in), q, k, v, stats, keep,
          lengths = opt.key_lengths, causal = opt.causal, d](const Tensor& g) {
           Tensor scratch = Tensor::empty(
               {kernels::attention_scratch_threads(), 3, std::min(kernels::kAttentionRowBlock, d.Tq), d.Tk});
           kernels::attention_backward(rq ? grad_buffer(rq) : nullptr, rk ? grad_buffer(rk) : nullptr,
                                       rv ? grad_buffer(rv) : nullptr, g.data(), q.data(), k.data(), v.data(),
                                       stats.data(), keep.defined() ? keep.data() : nullptr, scratch.data(),
                                       lengths.empty() ? nullptr : lengths.data(), causal, d);
         });
  if (probabilities) *probabilities = probs;
  return out;
}

}  // namespace tfm
