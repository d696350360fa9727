// One micro-batch through the forward and backward, the one path every training step takes: the
// objective's next batch cut into one shard of whole rows per worker (one worker: one shard, run on
// the calling thread with every thread for its kernels; train.data_parallel workers: one shard each,
// on one thread each, in one OpenMP region), each shard's loss backpropagated into its worker's
// gradient buffer (worker 0: the model's own; worker w: replica w's, the same weights). Private to
// src/training/.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "tfm/models/model.h"
#include "tfm/objectives/objective.h"

namespace tfm {

// What one micro-batch measured: the objective's loss (the shards' sum, without auxiliary terms), its
// real tokens, and the objective's auxiliary loss unweighted (ShardLoss::auxiliary's sum; 0 without).
struct MicroBatchLoss {
  double loss = 0, tokens = 0, auxiliary = 0;
};

class MicroBatches {
 public:
  MicroBatches(Objective& objective, int workers);
  int workers() const { return workers_; }
  // The objective's next micro-batch, cut into a shard per worker.
  BatchShards next();
  // A micro-batch's figures. The gradient of its loss + auxiliary_weight times the objective's auxiliary
  // term (multi-token prediction: mtp_weight_at, optim.h), scaled by `scale` (its share of the step's
  // counted positions: the update of one larger batch), is added into the workers' gradient buffers.
  MicroBatchLoss run(const BatchShards& shards, float scale, float auxiliary_weight);
  // Adds the replicas' gradients into the model's, in worker order (the same sums every run), and
  // zeroes theirs for the next step: one pass over each buffer.
  void sum_gradients();

 private:
  Objective& objective_;
  int workers_;
  std::vector<std::unique_ptr<Model>> replicas_;  // workers 1..W-1
};

}  // namespace tfm
