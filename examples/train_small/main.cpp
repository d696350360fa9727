// Trains a small character-level Transformer on a text file through tfm's C++ API:
//   train_small TEXT_FILE        (prints the loss as it falls; exit 1 if it did not)
#include <cstdio>
#include <vector>

#include "tfm/data/dataset.h"
#include "tfm/models/language_model.h"
#include "tfm/objectives/text_data.h"
#include "tfm/training/optim.h"

int main(int argc, char** argv) {
  using namespace tfm;
  if (argc != 2) return std::fprintf(stderr, "usage: %s TEXT_FILE\n", argv[0]), 2;
  const int64_t B = 8, T = 32, steps = 120;
  const Dataset data = load_dataset(argv[1], "char", 0.1, T);  // vocabulary: the file's characters
  ModelConfig mc;                                              // every other field: the reference defaults
  mc.vocab_size = data.tokenizer.size();
  mc.d_model = 64, mc.n_layers = 2, mc.n_heads = 4, mc.n_kv_heads = 4, mc.d_ff = 256, mc.max_seq_len = T;
  LanguageModel model(mc, /*init_seed=*/1337);
  model.set_training(true);
  // AdamW decays the matrices only (OptimizerKind::Muon as its name would give the blocks' matrices to Muon).
  Optimizer adamw(OptimizerConfig{}, optimizer_segments(model), model.parameter_count());
  BatchSampler sampler(/*seed=*/1);
  std::vector<int32_t> x, y;  // (B, T) inputs and next-token targets
  const double before = evaluate(model, data.val, B, T, 8, 7);
  for (int64_t step = 1; step <= steps; ++step) {
    sampler.sample(data.train, B, T, x, y);
    Tensor grads = model.flat_grads();
    grads.fill_(0.0f);
    Tensor loss = LanguageModel::loss(model.forward(x, B, T), y);  // mean cross-entropy
    loss.backward();                                               // gradients land in flat_grads()
    clip_grad_norm(grads.data(), grads.numel(), 1.0);
    adamw.step(model.flat_values().data(), grads.data(), 3e-3);
    if (step % 20 == 0) std::printf("step %3ld  loss %.4f\n", static_cast<long>(step), loss.item());
  }
  const double after = evaluate(model, data.val, B, T, 8, 7);
  std::printf("%ld parameters; validation loss %.4f -> %.4f\n", static_cast<long>(model.parameter_count()),
              before, after);
  return after < before ? 0 : 1;
}
