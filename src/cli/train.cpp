// `tfm train`: a new run from a config, or the continuation of a run.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/analysis/figures.h"
#include "tfm/config/config.h"
#include "tfm/engine/error.h"
#include "tfm/engine/platform.h"
#include "tfm/training/checkpoint.h"
#include "tfm/training/trainer.h"

namespace tfm::cli {
namespace {

struct TrainCliOptions {
  std::string config_file, resume_dir, out, init_from;
  std::vector<std::string> sets;
  int64_t stop_at = -1;
  double target_loss = -1;  // < 0: the config's train.target_loss
  double max_seconds = -1;  // < 0: the config's train.max_seconds
};

int train_command(const TrainCliOptions& o) {
  const std::string &config_file = o.config_file, &resume_dir = o.resume_dir, &out = o.out,
                    &init_from = o.init_from;
  std::vector<std::string> sets = o.sets;
  if (o.target_loss >= 0) sets.push_back("train.target_loss=" + fmt::format("{}", o.target_loss));
  if (o.max_seconds >= 0) sets.push_back("train.max_seconds=" + fmt::format("{}", o.max_seconds));
  if (!config_file.empty() && !resume_dir.empty())
    throw ConfigError(
        "train: give either --config FILE (a new run) or --resume DIR (continue a run), not both");
  // A new run without a config names at least one key (--target-loss or --max-seconds alone is not a
  // run of the defaults on the default corpus).
  if (config_file.empty() && resume_dir.empty() && o.sets.empty())
    throw ConfigError(
        "train: give --config FILE (a new run), --resume DIR (continue a run), or --set KEY=VALUE ... (a new "
        "run of every key's default: tfm train --set data.path=notes.txt)");
  TrainOptions options;
  options.stop = platform::stop_on_signals();
  options.stop_at_step = o.stop_at;
  options.init_from = init_from;
  options.on_evaluation = [](const std::string& dir) { write_loss_figure(dir); };  // DIR/loss.svg
  TrainResult r;
  // What the pre-flight estimated (tfm info): an allocation failure past it still names the sizes.
  const std::string sizes = "train.batch_size, train.seq_len and the model.* sizes";
  if (!resume_dir.empty()) {
    if (!out.empty()) throw ConfigError("--out: a resumed run stays in its directory " + resume_dir);
    if (!init_from.empty()) throw ConfigError("--init-from: only for a new run, not with --resume");
    r = sized_by(sizes, [&] { return resume(resume_dir, sets, options); });
  } else {
    std::vector<std::string> all = sets;
    if (!out.empty()) all.push_back("output.dir=" + nlohmann::json(out).dump());
    r = sized_by(sizes, [&] { return train(load_config(config_file, all), options); });
  }
  // Stopped while the data was read: no log exists yet (nothing was written), so it is said here.
  if (r.status == TrainResult::Status::Interrupted && !r.message.empty())
    std::fprintf(stderr, "tfm: interrupted: %s. %s\n", r.message.c_str(),
                 (!resume_dir.empty()   ? "Continue with: tfm train --resume " + resume_dir
                  : config_file.empty() ? std::string("Start the run again with the same command")
                                        : "Start the run again with the same command: tfm train --config " +
                                              config_file + " ...")
                     .c_str());
  // Otherwise the trainer has logged what happened (console and train.log).
  return r.status == TrainResult::Status::NonFinite ? kExitDiverged : kExitOk;
}

}  // namespace

std::vector<Command> add_train_commands(CLI::App& app) {
  auto o = std::make_shared<TrainCliOptions>();
  auto* train = app.add_subcommand("train", "Train a model from a config, or continue a run");
  train
      ->add_option("--config", o->config_file,
                   "JSON config of a new run (configs/*.json); without one, --set keys change the defaults")
      ->type_name("FILE");
  train
      ->add_option("--resume", o->resume_dir,
                   "Continue the run in DIR from its last.ckpt, else its best.ckpt (bit-identical to an "
                   "uninterrupted run when no --set changes train.max_steps)")
      ->type_name("DIR");
  const std::string resumable = resumable_keys_text();
  train
      ->add_option(
          "--set", o->sets,
          "Override a key: --set train.max_steps=500 (repeatable; on --resume only " + resumable + ")")
      ->type_name("KEY=VALUE");
  train->add_option("--out", o->out, "Run directory (default: output.dir, i.e. runs/<config name>)")
      ->type_name("DIR")
      ->check(non_empty("a directory"));
  train->add_option("--init-from", o->init_from, "Initial weights from a safetensors file (tfm export)")
      ->type_name("FILE");
  train
      ->add_option("--target-loss", o->target_loss,
                   "Stop at the first evaluation with val loss <= X and report the time it took (sets "
                   "train.target_loss; evaluations every train.eval_interval steps)")
      ->type_name("X")
      ->check(number_in(0, 1e9));
  train
      ->add_option(
          "--max-seconds", o->max_seconds,
          "Time budget of the training loop: stop, evaluate and save while the closing evaluation still "
          "fits in S seconds (sets train.max_seconds; the schedule still runs over train.max_steps)")
      ->type_name("S")
      ->check(number_in(0, 1e9));
  train->add_option("--stop-at", o->stop_at, "Stop as if interrupted after this step (for testing resume)")
      ->group("")
      ->check(integer_in(-1, kMaxFlagCount));
  train->footer(
      "\nExamples:\n  tfm train --config configs/shakespeare_char.json\n"
      "  tfm train --config configs/tiny.json --set train.max_steps=100 --out runs/tiny\n"
      "  tfm train --set data.path=notes.txt --set train.max_steps=500   # every other key's default: "
      "runs/notes\n"
      "  tfm train --resume runs/shakespeare_char --set train.max_steps=4000\n"
      "  tfm train --config configs/shakespeare_speedrun.json --target-loss 1.5   # time to quality\n"
      "Ctrl-C finishes the current step (or abandons an evaluation), writes last.ckpt and exits; --resume "
      "continues.\n");
  return {{train, [o] { return train_command(*o); }}};
}

}  // namespace tfm::cli
