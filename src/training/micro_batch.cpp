#include "micro_batch.h"

#include <omp.h>

#include <exception>

#include "tfm/engine/ops.h"

namespace tfm {

MicroBatches::MicroBatches(Objective& objective, int workers) : objective_(objective), workers_(workers) {
  for (int w = 1; w < workers_; ++w) replicas_.push_back(objective_.replica());
}

BatchShards MicroBatches::next() {
  return objective_.train_batch_shards(workers_);
}

MicroBatchLoss MicroBatches::run(const BatchShards& shards, float scale, float auxiliary_weight) {
  Model& master = objective_.model();
  // Each replica's dropout stream is seeded from the master's, so the checkpointed master state is
  // all a resumed run needs to draw the same masks.
  for (auto& r : replicas_) r->dropout_rng().seed_with(master.dropout_rng().next_u64());
  std::vector<double> losses(static_cast<size_t>(workers_), 0.0), auxiliaries(losses.size(), 0.0);
  const auto shard = [&](int w) {
    Model& model = w == 0 ? master : *replicas_[static_cast<size_t>(w - 1)];
    const ShardLoss shard_loss = shards.losses[static_cast<size_t>(w)](model);
    Tensor loss = shard_loss.loss;
    if (!loss.defined()) return;  // no counted position in this shard
    losses[static_cast<size_t>(w)] = loss.item();
    if (shard_loss.auxiliary.defined()) {  // the objective's term, already scaled to the shard's share
      auxiliaries[static_cast<size_t>(w)] = shard_loss.auxiliary.item();
      if (auxiliary_weight != 0.0f) loss = loss + shard_loss.auxiliary * auxiliary_weight;
    }
    // Top-k gating's balance term joins the gradient, not the logged loss (which stays the
    // objective's, comparable across variants): over this shard's tokens, a 1/workers share of it per
    // shard (the whole batch's term up to how the shards' head usage differs).
    const Tensor aux = model.take_auxiliary_loss();
    if (aux.defined()) loss = loss + (workers_ > 1 ? aux * (1.0f / static_cast<float>(workers_)) : aux);
    if (scale != 1.0f) loss = loss * scale;
    loss.backward();
  };
  if (workers_ == 1) {
    shard(0);
  } else {
    std::exception_ptr error;
#pragma omp parallel num_threads(workers_)
    {
      omp_set_num_threads(1);  // this worker's kernels (nested regions, oneDNN) run on its own thread
      try {
        shard(omp_get_thread_num());
      } catch (...) {
#pragma omp critical(tfm_data_parallel_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }
  MicroBatchLoss out;
  for (size_t w = 0; w < losses.size(); ++w) out.loss += losses[w], out.auxiliary += auxiliaries[w];
  out.tokens = static_cast<double>(shards.tokens);
  return out;
}

void MicroBatches::sum_gradients() {
  if (replicas_.empty()) return;
  float* g = objective_.model().flat_grads().data();
  const int64_t P = objective_.model().parameter_count();
#pragma omp parallel num_threads(workers_)
  {
    const int n = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = P * t / n, end = P * (t + 1) / n;
    for (const auto& r : replicas_) {
      float* rg = r->flat_grads().data();
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) g[i] += rg[i];
      std::fill(rg + begin, rg + end, 0.0f);
    }
  }
}

}  // namespace tfm
