// Fused scaled-dot-product attention: the kernel pair over raw floats, then the op beside its backward.
// Legend: B batch, Tq/Tk query/key length, H/Hkv query/key-value heads, Dk/Dv per-head widths.
#include "tfm/engine/fused_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels.h"
#include "tfm/engine/gemm.h"
#include "vecmath.h"

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

int attention_scratch_threads() {
  return omp_get_max_threads();
}

int64_t attention_scratch_floats(const AttentionDims& d, bool backward) {
  const int64_t rows = std::min(kAttentionRowBlock, d.Tq);
  const int64_t blocks = (backward ? 3 : 2) * rows * d.Tk;  // P (and dP, Pd)
  // Gathered rows (head gating): Q and O (forward); Q, dO and dQ (backward).
  const int64_t gathered = d.row_list ? rows * (backward ? 2 * d.Dk + d.Dv : d.Dk + d.Dv) : 0;
  return blocks + gathered;
}

namespace {

// A block of query rows of one (batch, head): `rows` consecutive rows from i0, or, with head gating,
// rows index[0..rows) of the (batch, head)'s selected rows (increasing).
struct RowBlock {
  int64_t rows = 0, i0 = 0;
  const int64_t* index = nullptr;
  int64_t row(int64_t i) const { return index ? index[i] : i0 + i; }
  int64_t last() const { return row(rows - 1); }
};

// The rows of (b, h) that attend: [begin, end) of the selected-row list, or all Tq rows.
std::pair<int64_t, int64_t> row_range(int64_t b, int64_t h, const AttentionDims& d) {
  if (!d.row_list) return {0, d.Tq};
  return {d.row_offsets[b * d.H + h], d.row_offsets[b * d.H + h + 1]};
}
RowBlock row_block(int64_t begin, int64_t at, int64_t end, const AttentionDims& d) {
  RowBlock r;
  r.rows = std::min(kRowBlock, end - at);
  if (d.row_list)
    r.index = d.row_list + at;
  else
    r.i0 = at - begin;
  return r;
}

// Copies `rows` rows of `cols` floats: row blk.row(i) of src (ld lds) -> row i of dst (ld ldd).
void gather_rows(float* dst, int64_t ldd, const float* src, int64_t lds, const RowBlock& blk, int64_t cols) {
  for (int64_t i = 0; i < blk.rows; ++i) std::copy_n(src + blk.row(i) * lds, cols, dst + i * ldd);
}

// S = Q K^T / sqrt(Dk) for a block of rows (qb: the block's rows, ld ldq) over the first n keys, then
// the softmax of each row over its visible keys: the forward writes the row statistics (max, 1 / sum)
// of row r at stats_out[2r], the backward reuses them, so both produce the same P bit for bit. Masked
// keys, and fully masked rows, get P = 0. stats_in: the saved statistics (backward), or null to
// compute them into stats_out (forward). Both are the (batch, head)'s (Tq, 2) statistics.
void block_probabilities(float* p, float* stats_out, const float* stats_in, const float* qb, int64_t ldq,
                         const float* kg, const RowBlock& blk, int64_t n, int64_t b,
                         const int64_t* key_lengths, bool causal, const AttentionDims& d) {
  const int64_t ldk = d.Hkv * d.Dk;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.Dk));
  gemm(false, true, blk.rows, n, d.Dk, scale, qb, ldq, kg, ldk, 0.0f, p, d.Tk);
  for (int64_t i = 0; i < blk.rows; ++i) {
    float* row = p + i * d.Tk;
    const int64_t r = blk.row(i);
    const int64_t ni = visible_keys(r, b, key_lengths, causal, d);
    float mx = -INFINITY, inv = 0.0f;
    if (stats_in) {
      mx = stats_in[2 * r];
      inv = stats_in[2 * r + 1];
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
      stats_out[2 * r] = mx;
      stats_out[2 * r + 1] = inv;
    }
#pragma omp simd
    for (int64_t j = 0; j < ni; ++j) row[j] *= inv;
    std::fill(row + ni, row + d.Tk, 0.0f);
  }
}

// P o M for a block into pd (M: the (batch, head)'s (Tq, Tk) dropout multipliers).
void apply_keep(float* pd, const float* p, const float* keep_bh, const RowBlock& blk,
                const AttentionDims& d) {
  for (int64_t i = 0; i < blk.rows; ++i) {
    const float* m = keep_bh + blk.row(i) * d.Tk;
    for (int64_t j = 0; j < d.Tk; ++j) pd[i * d.Tk + j] = p[i * d.Tk + j] * m[j];
  }
}

}  // namespace

void attention_forward(float* out, float* stats, float* probs, const float* q, const float* k, const float* v,
                       const float* keep, float* scratch, const int64_t* key_lengths, bool causal,
                       const AttentionDims& d) {
  const int64_t group = d.H / d.Hkv;
  const int64_t ldq = d.H * d.Dk, ldv = d.Hkv * d.Dv, ldo = d.H * d.Dv;
  const int64_t per_thread = attention_scratch_floats(d, false);
  // (batch, head) pairs are independent: split them over the threads, each with its own scratch.
#pragma omp parallel for schedule(static) if (parallel_worth_it(d))
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const int64_t b = bh / d.H, h = bh % d.H, g = h / group;
    const int64_t block = std::min(kRowBlock, d.Tq) * d.Tk;        // floats of one (rows, Tk) block
    float* p_t = scratch + omp_get_thread_num() * per_thread;      // (rows, Tk): P of a block
    float* pd_t = p_t + block;                                     // (rows, Tk): P o M
    float* qc = pd_t + block;                                      // gathered: (rows, Dk) Q rows
    float* oc = qc + std::min(kRowBlock, d.Tq) * d.Dk;             // gathered: (rows, Dv) outputs
    const float* kg = k + b * d.k_batch_stride + g * d.Dk;         // (Tk, Dk), ld Hkv*Dk
    const float* vg = v + b * d.v_batch_stride + g * d.Dv;         // (Tk, Dv), ld Hkv*Dv
    const float* qh = q + b * d.q_batch_stride + h * d.Dk;         // (Tq, Dk), ld H*Dk
    float* oh = out + b * d.Tq * ldo + h * d.Dv;                   // (Tq, Dv), ld H*Dv
    float* stats_bh = stats + 2 * bh * d.Tq;                       // (Tq, 2)
    float* probs_bh = probs ? probs + bh * d.Tq * d.Tk : nullptr;  // (Tq, Tk)
    const auto [begin, end] = row_range(b, h, d);
    if (d.row_list) {  // head gating: rows this head does not serve give zero output (and P)
      for (int64_t i = 0; i < d.Tq; ++i) std::fill_n(oh + i * ldo, d.Dv, 0.0f);
      if (probs_bh) std::fill_n(probs_bh, d.Tq * d.Tk, 0.0f);
    }
    for (int64_t at = begin; at < end; at += kRowBlock) {
      const RowBlock blk = row_block(begin, at, end, d);
      const int64_t n = visible_keys(blk.last(), b, key_lengths, causal, d);  // the block's widest row
      const float* qb = qh + blk.row(0) * ldq;  // (rows, Dk), ld H*Dk (consecutive rows)
      int64_t ldqb = ldq;
      if (blk.index) {
        gather_rows(qc, d.Dk, qh, ldq, blk, d.Dk);
        qb = qc, ldqb = d.Dk;
      }
      // Consecutive rows write P straight into probs; gathered ones are copied there below.
      float* p = probs_bh && !blk.index ? probs_bh + blk.row(0) * d.Tk : p_t;  // (rows, Tk)
      block_probabilities(p, stats_bh, nullptr, qb, ldqb, kg, blk, n, b, key_lengths, causal, d);
      if (probs_bh && blk.index)
        for (int64_t i = 0; i < blk.rows; ++i) std::copy_n(p + i * d.Tk, d.Tk, probs_bh + blk.row(i) * d.Tk);
      float* ob = blk.index ? oc : oh + blk.row(0) * ldo;  // (rows, Dv)
      const int64_t ldob = blk.index ? d.Dv : ldo;
      if (n == 0) {  // no key visible to the block: zero output
        for (int64_t i = 0; i < blk.rows; ++i) std::fill_n(ob + i * ldob, d.Dv, 0.0f);
      } else {
        // O = (P o M) V.
        const float* used = p;
        if (keep) {
          apply_keep(pd_t, p, keep + bh * d.Tq * d.Tk, blk, d);
          used = pd_t;
        }
        gemm(false, false, blk.rows, d.Dv, n, 1.0f, used, d.Tk, vg, ldv, 0.0f, ob, ldob);
      }
      if (blk.index)
        for (int64_t i = 0; i < blk.rows; ++i) std::copy_n(oc + i * d.Dv, d.Dv, oh + blk.row(i) * ldo);
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* stats, const float* keep, float* scratch,
                        const int64_t* key_lengths, bool causal, const AttentionDims& d) {
  const int64_t group = d.H / d.Hkv;
  const int64_t ldq = d.H * d.Dk, ldk = d.Hkv * d.Dk, ldv = d.Hkv * d.Dv, ldo = d.H * d.Dv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.Dk));
  const int64_t per_thread = attention_scratch_floats(d, true);
  // Parallel over (batch, kv head): the query heads sharing a kv head add into the same dK/dV
  // block, so they run one after another in the same thread.
#pragma omp parallel for schedule(static) if (parallel_worth_it(d))
  for (int64_t bg = 0; bg < d.B * d.Hkv; ++bg) {
    const int64_t b = bg / d.Hkv, g = bg % d.Hkv;
    const int64_t block = std::min(kRowBlock, d.Tq) * d.Tk;      // floats of one (rows, Tk) block
    float* p = scratch + omp_get_thread_num() * per_thread;      // (rows, Tk): P, recomputed
    float* dp = p + block;                                       // (rows, Tk): dP, then dS in place
    float* pd = dp + block;                                      // (rows, Tk): P o M with dropout
    float* qc = pd + block;                                      // gathered: (rows, Dk) Q rows
    float* doc = qc + std::min(kRowBlock, d.Tq) * d.Dk;          // gathered: (rows, Dv) dO rows
    float* dqc = doc + std::min(kRowBlock, d.Tq) * d.Dv;         // gathered: (rows, Dk) dQ rows
    const float* kg = k + b * d.k_batch_stride + g * d.Dk;       // (Tk, Dk)
    const float* vg = v + b * d.v_batch_stride + g * d.Dv;       // (Tk, Dv)
    float* dkg = dk ? dk + b * d.Tk * ldk + g * d.Dk : nullptr;  // (Tk, Dk), ld Hkv*Dk
    float* dvg = dv ? dv + b * d.Tk * ldv + g * d.Dv : nullptr;  // (Tk, Dv), ld Hkv*Dv
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t bh = b * d.H + h;
      const float* qh = q + b * d.q_batch_stride + h * d.Dk;       // (Tq, Dk), ld H*Dk
      const float* doh = dout + b * d.Tq * ldo + h * d.Dv;         // (Tq, Dv), ld H*Dv
      float* dqh = dq ? dq + b * d.Tq * ldq + h * d.Dk : nullptr;  // (Tq, Dk), ld H*Dk
      const auto [begin, end] = row_range(b, h, d);
      for (int64_t at = begin; at < end; at += kRowBlock) {
        const RowBlock blk = row_block(begin, at, end, d);
        const int64_t n = visible_keys(blk.last(), b, key_lengths, causal, d);
        if (n == 0) continue;                       // P is zero on the whole block: no gradient
        const float* qb = qh + blk.row(0) * ldq;    // (rows, Dk)
        const float* dob = doh + blk.row(0) * ldo;  // (rows, Dv)
        int64_t ldqb = ldq, ldob = ldo;
        if (blk.index) {
          gather_rows(qc, d.Dk, qh, ldq, blk, d.Dk);
          gather_rows(doc, d.Dv, doh, ldo, blk, d.Dv);
          qb = qc, dob = doc, ldqb = d.Dk, ldob = d.Dv;
        }
        const float* keep_bh = keep ? keep + bh * d.Tq * d.Tk : nullptr;
        block_probabilities(p, nullptr, stats + 2 * bh * d.Tq, qb, ldqb, kg, blk, n, b, key_lengths, causal,
                            d);
        if (dvg) {  // dV (n, Dv) += Pd^T dO
          const float* used = p;
          if (keep_bh) {
            apply_keep(pd, p, keep_bh, blk, d);
            used = pd;
          }
          gemm(true, false, n, d.Dv, blk.rows, 1.0f, used, d.Tk, dob, ldob, 1.0f, dvg, ldv);
        }
        if (!dqh && !dkg) continue;
        // dP = (dO V^T) o M;  dS = P o (dP - rowsum(dP o P))  (softmax backward, in place).
        gemm(false, true, blk.rows, n, d.Dv, 1.0f, dob, ldob, vg, ldv, 0.0f, dp, d.Tk);
        for (int64_t i = 0; i < blk.rows; ++i) {
          float* row = dp + i * d.Tk;
          const float* pr = p + i * d.Tk;
          if (keep_bh) {
            const float* m = keep_bh + blk.row(i) * d.Tk;
            for (int64_t j = 0; j < n; ++j) row[j] *= m[j];
          }
          float dot = 0.0f;
          for (int64_t j = 0; j < n; ++j) dot += row[j] * pr[j];
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) row[j] = pr[j] * (row[j] - dot);
        }
        if (dqh) {  // dQ (rows, Dk) += dS K / sqrt(Dk)
          if (blk.index) {
            gemm(false, false, blk.rows, d.Dk, n, scale, dp, d.Tk, kg, ldk, 0.0f, dqc, d.Dk);
            for (int64_t i = 0; i < blk.rows; ++i) {
              float* dst = dqh + blk.row(i) * ldq;
              for (int64_t c = 0; c < d.Dk; ++c) dst[c] += dqc[i * d.Dk + c];
            }
          } else {
            gemm(false, false, blk.rows, d.Dk, n, scale, dp, d.Tk, kg, ldk, 1.0f, dqh + blk.row(0) * ldq,
                 ldq);
          }
        }
        if (dkg)  // dK (n, Dk) += dS^T Q / sqrt(Dk)
          gemm(true, false, n, d.Dk, blk.rows, scale, dp, d.Tk, qb, ldqb, 1.0f, dkg, ldk);
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
  TFM_CHECK(q_in.dim() == 3 && k_in.dim() == 3 && v_in.dim() == 3, fn,
            "expected q (B, Tq, H*Dk), k (B, Tk, Hkv*Dk), ", "v (B, Tk, Hkv*Dv), got ",
            shape_str(q_in.shape()), ", ", shape_str(k_in.shape()), ", ", shape_str(v_in.shape()));
  kernels::AttentionDims d;
  d.B = q_in.size(0);
  d.Tq = q_in.size(1);
  d.Tk = k_in.size(1);
  d.H = opt.n_heads;
  d.Hkv = opt.n_kv_heads ? opt.n_kv_heads : opt.n_heads;
  TFM_CHECK(d.H > 0 && d.Hkv > 0 && d.H % d.Hkv == 0, fn, "n_heads ", d.H,
            " must be a multiple of n_kv_heads ", d.Hkv);
  TFM_CHECK(q_in.size(2) % d.H == 0, fn, "q ", shape_str(q_in.shape()), " width is not a multiple of ", d.H,
            " heads");
  d.Dk = q_in.size(2) / d.H;
  TFM_CHECK(v_in.size(2) % d.Hkv == 0, fn, "v ", shape_str(v_in.shape()), " width is not a multiple of ",
            d.Hkv, " kv heads");
  d.Dv = v_in.size(2) / d.Hkv;
  TFM_CHECK(
      k_in.size(0) == d.B && v_in.size(0) == d.B && v_in.size(1) == d.Tk && k_in.size(2) == d.Hkv * d.Dk, fn,
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
  Tensor keep;  // (B, H, Tq, Tk): 0 or 1/(1-p)
  if (drop) {
    // The dropout op's mask for a (B, H, Tq, Tk) tensor from the same generator, so the composed
    // form (dropout of the probabilities) matches.
    keep = Tensor::empty({d.B, d.H, d.Tq, d.Tk});
    kernels::dropout(keep.data(), nullptr, keep.numel(), opt.dropout, opt.rng->next_u64(), false);
  }
  // Head gating: the selected rows of each (batch, head) as one list, row_offsets (B*H + 1) into it.
  std::vector<int64_t> row_offsets, row_list;
  if (!opt.active_rows.empty()) {
    TFM_CHECK(static_cast<int64_t>(opt.active_rows.size()) == d.B * d.Tq * d.H, fn, "active_rows holds ",
              opt.active_rows.size(), " flags, expected B*Tq*H = ", d.B * d.Tq * d.H);
    row_offsets.assign(d.B * d.H + 1, 0);
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.H; ++h) {
        for (int64_t i = 0; i < d.Tq; ++i)
          if (opt.active_rows[(b * d.Tq + i) * d.H + h]) row_list.push_back(i);
        row_offsets[b * d.H + h + 1] = static_cast<int64_t>(row_list.size());
      }
    row_list.push_back(0);  // never read: keeps data() non-null when no row is selected
    d.row_offsets = row_offsets.data();
    d.row_list = row_list.data();
  }
  const int64_t threads = kernels::attention_scratch_threads();
  Tensor scratch = Tensor::empty({threads, kernels::attention_scratch_floats(d, false)});
  kernels::attention_forward(out.data(), stats.data(), probs.defined() ? probs.data() : nullptr, q.data(),
                             k.data(), v.data(), drop ? keep.data() : nullptr, scratch.data(),
                             opt.key_lengths.empty() ? nullptr : opt.key_lengths.data(), opt.causal, d);
  record(out, "scaled_dot_product_attention", {q_in, k_in, v_in},
         [rq = grad_ref(q_in), rk = grad_ref(k_in), rv = grad_ref(v_in), q, k, v, stats, keep,
          lengths = opt.key_lengths, causal = opt.causal, d, row_offsets = std::move(row_offsets),
          row_list = std::move(row_list)](const Tensor& g) {
           kernels::AttentionDims db = d;  // the row lists now live in this closure
           db.row_offsets = row_list.empty() ? nullptr : row_offsets.data();
           db.row_list = row_list.empty() ? nullptr : row_list.data();
           Tensor scratch = Tensor::empty(
               {kernels::attention_scratch_threads(), kernels::attention_scratch_floats(db, true)});
           kernels::attention_backward(rq ? grad_buffer(rq) : nullptr, rk ? grad_buffer(rk) : nullptr,
                                       rv ? grad_buffer(rv) : nullptr, g.data(), q.data(), k.data(), v.data(),
                                       stats.data(), keep.defined() ? keep.data() : nullptr, scratch.data(),
                                       lengths.empty() ? nullptr : lengths.data(), causal, db);
         });
  if (probabilities) *probabilities = probs;
  return out;
}

}  // namespace tfm
