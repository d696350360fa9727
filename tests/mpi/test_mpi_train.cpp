// Data-parallel training under MPI; run with `mpirun -np 2 test_mpi_train` (ctest does, see the MPI
// block of CMakeLists.txt). Checks:
//   (a) after every step of a real train() run (dropout on; AdamW and Muon), all ranks hold bit-identical
//       parameters;
//   (b) 2 ranks x batch B/2 with averaged gradients give the update of 1 rank x batch B (float
//       tolerance: the two halves' means are summed in a different order than the full-batch mean);
//   (c) a stop that reaches one rank alone while the corpus is tokenized ends every rank's run.
// Resume under MPI drives the tfm binary: tests/mpi/test_mpi_resume.sh.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/engine/random.h"
#include "tfm/models/language_model.h"
#include "tfm/training/distributed.h"
#include "tfm/training/optim.h"
#include "tfm/training/trainer.h"

namespace {

int g_failures = 0;
#define MPI_CHECK(cond, ...)                                                                            \
  do {                                                                                                  \
    if (!(cond)) {                                                                                      \
      std::fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: ", tfm::dist::rank(), __FILE__, __LINE__, \
                   #cond);                                                                              \
      std::fprintf(stderr, __VA_ARGS__);                                                                \
      std::fputc('\n', stderr);                                                                         \
      ++g_failures;                                                                                     \
    }                                                                                                   \
  } while (0)

uint64_t fnv1a(const float* data, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  for (int64_t i = 0; i < n * 4; ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  return h;
}

// (a) A 2-rank run of the real trainer: parameters identical on all ranks after each step, for
// each objective (`extra`: the overrides that select it).
void test_identical_parameters(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> sets = {"train.max_steps=5", "model.dropout=0.1", "train.eval_interval=5",
                                   "output.dir=\"" + dir + "\"", "train.log_interval=1"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  tfm::Config config = tfm::load_config(std::string(TFM_SOURCE_DIR) + "/configs/tiny.json", sets);
  if (config.string("train.objective") != "seq2seq")
    config.tree["data"]["path"] = std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt";
  tfm::TrainOptions opt;
  opt.console = false;
  int64_t checked = 0;
  opt.on_step = [&](int64_t step, const tfm::Model& model) {
    const tfm::Tensor v = model.flat_values();
    const std::vector<uint64_t> all = tfm::dist::allgather({fnv1a(v.data(), v.numel())});
    for (size_t r = 1; r < all.size(); ++r)
      MPI_CHECK(all[r] == all[0],
                "step %ld: parameters of rank %zu differ from rank 0's (hash %016llx vs %016llx)",
                static_cast<long>(step), r, static_cast<unsigned long long>(all[r]),
                static_cast<unsigned long long>(all[0]));
    ++checked;
  };
  const tfm::TrainResult r = tfm::train(config, opt);
  MPI_CHECK(r.status == tfm::TrainResult::Status::Finished, "train() did not finish: %s", r.message.c_str());
  MPI_CHECK(checked == 5, "on_step ran %ld times, expected 5", static_cast<long>(checked));
  // The logged loss is the mean over ranks: the same number on every rank.
  for (size_t i = 0; i < r.losses.size(); ++i) {
    const double mean = tfm::dist::allreduce_mean(r.losses[i]);
    MPI_CHECK(mean == r.losses[i], "step %zu: loss %.9g on this rank, mean over ranks %.9g", i + 1,
              r.losses[i], mean);
  }
  if (tfm::dist::is_root())
    MPI_CHECK(std::filesystem::exists(dir + "/last.ckpt"), "rank 0 wrote no %s/last.ckpt", dir.c_str());
}

// (c) A stop that reaches one rank alone while the corpus is tokenized (a signal to one process): every
// rank returns Interrupted before the first step, none waits in a collective for the rank that stopped.
void test_stop_on_one_rank_while_tokenizing(const std::string& dir) {
  // A corpus with no cache yet, so that it is tokenized now: a copy per rank, so that rank 1 tokenizes
  // too (on one file, the rank that waits for another's build would read it, not tokenize).
  const std::string corpus = dir + "/corpus_" + std::to_string(tfm::dist::rank()) + ".txt";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(std::string(TFM_SOURCE_DIR) + "/tests/data/tiny_shakespeare.txt", corpus,
                             std::filesystem::copy_options::overwrite_existing);
  const tfm::Config config = tfm::load_config(
      std::string(TFM_SOURCE_DIR) + "/configs/tiny.json",
      {"train.max_steps=5", "output.dir=\"" + dir + "/stopped\"", "data.path=\"" + corpus + "\""});
  std::atomic<bool> stop(tfm::dist::rank() == 1);
  tfm::TrainOptions opt;
  opt.console = false;
  opt.stop = &stop;
  const tfm::TrainResult r = tfm::train(config, opt);
  MPI_CHECK(r.status == tfm::TrainResult::Status::Interrupted, "status %d, expected Interrupted (%s)",
            static_cast<int>(r.status), r.message.c_str());
  MPI_CHECK(r.message.find("no step was trained") != std::string::npos, "message: %s", r.message.c_str());
  tfm::dist::barrier();
  MPI_CHECK(!std::filesystem::exists(dir + "/stopped/last.ckpt"), "a checkpoint was written");
}

// (b) Gradient averaging over ranks equals the full-batch gradient; one SGD step then agrees too.
void test_split_batch_matches_full_batch() {
  tfm::ModelConfig mc;
  mc.vocab_size = 17, mc.d_model = 32, mc.n_layers = 2, mc.n_heads = 4, mc.d_ff = 64, mc.max_seq_len = 16;
  mc.dropout = 0.0;
  const int64_t B = 8, T = 16, ranks = tfm::dist::size(), Bl = B / ranks;
  MPI_CHECK(B % ranks == 0, "B = %ld is not divisible by %ld ranks", static_cast<long>(B),
            static_cast<long>(ranks));
  tfm::Rng rng(7);
  std::vector<int32_t> x(B * T), y(B * T);
  for (auto& t : x) t = static_cast<int32_t>(rng.below(17));
  for (auto& t : y) t = static_cast<int32_t>(rng.below(17));
  tfm::OptimizerConfig sgd;
  sgd.name = tfm::OptimizerKind::Sgd, sgd.momentum = 0.0, sgd.weight_decay = 0.0;
  const double lr = 0.5;

  auto step_on = [&](tfm::LanguageModel& m, int64_t row0, int64_t rows, bool average) {
    m.set_training(true);
    const int64_t P = m.parameter_count();
    m.flat_grads().fill_(0.0f);
    const std::vector<int32_t> xs(x.begin() + row0 * T, x.begin() + (row0 + rows) * T);
    const std::vector<int32_t> ys(y.begin() + row0 * T, y.begin() + (row0 + rows) * T);
    tfm::LanguageModel::loss(m.forward(xs, rows, T), ys).backward();
    if (average) tfm::dist::allreduce_mean(m.flat_grads().data(), P);
    tfm::Optimizer opt(sgd, {{0, P, false}}, P);
    opt.step(m.flat_values().data(), m.flat_grads().data(), lr);
  };
  tfm::LanguageModel split(mc, 1234);
  step_on(split, tfm::dist::rank() * Bl, Bl, true);
  if (!tfm::dist::is_root()) return;
  tfm::LanguageModel full(mc, 1234);
  step_on(full, 0, B, false);
  const int64_t P = full.parameter_count();
  const float *gs = split.flat_grads().data(), *gf = full.flat_grads().data();
  const float *vs = split.flat_values().data(), *vf = full.flat_values().data();
  double max_g = 0.0, max_gd = 0.0, max_vd = 0.0;
  for (int64_t i = 0; i < P; ++i) {
    max_g = std::max(max_g, std::fabs(static_cast<double>(gf[i])));
    max_gd = std::max(max_gd, std::fabs(static_cast<double>(gs[i]) - gf[i]));
    max_vd = std::max(max_vd, std::fabs(static_cast<double>(vs[i]) - vf[i]));
  }
  std::printf("split vs full batch: max |grad diff| %.3g (max |grad| %.3g), max |param diff| %.3g\n", max_gd,
              max_g, max_vd);
  MPI_CHECK(max_g > 1e-3, "the full-batch gradient is ~0 (max %.3g): the comparison would prove nothing",
            max_g);
  MPI_CHECK(max_gd <= 1e-5 * std::max(1.0, max_g), "averaged gradient differs from the full batch's by %.3g",
            max_gd);
  MPI_CHECK(max_vd <= 1e-5, "parameters after one step differ by %.3g", max_vd);
}

// `test_mpi_train --bench P`: the time of one allreduce_mean over P floats with the ranks already in
// step (barrier first), i.e. the transfer alone, without the wait for a slower rank that the trainer's
// figure includes. Median of 21.
int bench_allreduce(int64_t P) {
  std::vector<float> buf(static_cast<size_t>(P), 1.0f);
  std::vector<double> ms;
  for (int i = 0; i < 21; ++i) {
    tfm::dist::barrier();
    const double before = tfm::dist::allreduce_seconds();
    tfm::dist::allreduce_mean(buf.data(), P);
    ms.push_back(1e3 * (tfm::dist::allreduce_seconds() - before));
  }
  std::sort(ms.begin(), ms.end());
  if (tfm::dist::is_root())
    std::printf("allreduce_mean of %ld floats (%.1f MB) over %d ranks: median %.3f ms (min %.3f, max %.3f)\n",
                static_cast<long>(P), 4e-6 * static_cast<double>(P), tfm::dist::size(), ms[10], ms[0],
                ms[20]);
  tfm::dist::finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tfm::dist::init(&argc, &argv);
  if (argc == 3 && std::string(argv[1]) == "--bench") return bench_allreduce(std::stoll(argv[2]));
  std::printf("%s\n", tfm::dist::describe().c_str());
  MPI_CHECK(tfm::dist::size() >= 2, "run under mpirun -np 2 (size is %d)", tfm::dist::size());
  // One run directory, named by rank 0's pid, shared by the ranks (only rank 0 writes into it).
  uint64_t pid = static_cast<uint64_t>(::getpid());
  tfm::dist::broadcast(&pid, 1, 0);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("tfm_mpi_test_" + std::to_string(pid))).string();
  try {
    test_identical_parameters(dir + "/causal_lm", {});
    // Muon: every rank runs the same Newton-Schulz products on the averaged gradient.
    test_identical_parameters(dir + "/muon", {"train.optimizer.name=muon", "train.lr_schedule.name=wsd"});
    test_identical_parameters(dir + "/masked_lm", {"train.objective=masked_lm", "model.causal=false"});
    test_identical_parameters(
        dir + "/seq2seq",
        {"train.objective=seq2seq", "data.tokenizer=word", "train.batch_size=4", "data.val_fraction=0.2",
         "data.path=" + std::string(TFM_SOURCE_DIR) + "/tests/fixtures/eng_fra_head.txt"});
    test_split_batch_matches_full_batch();
    test_stop_on_one_rank_while_tokenizing(dir + "/stop");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: exception: %s\n", tfm::dist::rank(), e.what());
    ++g_failures;
    tfm::dist::abort(1);
  }
  tfm::dist::barrier();
  if (tfm::dist::is_root()) std::filesystem::remove_all(dir);
  // Every rank's failures decide the status of every rank.
  const bool failed = tfm::dist::any(g_failures > 0);
  if (tfm::dist::is_root()) std::printf("%s\n", failed ? "FAILED" : "all checks passed");
  tfm::dist::finalize();
  return failed ? 1 : 0;
}
