// Trained runs of each objective, as small as a model gets (d_model 8, one layer, context 8), made once
// per test binary through the CLI and removed when it exits: for tests that feed commands odd input.
#pragma once
#include <catch2/catch.hpp>
#include <string>

#include "cli_run.h"
#include "objective_data.h"

namespace tfm_test {

// `tfm train` of configs/tiny.json shrunk, with `sets` ("--set k=v ..."), into a scratch directory.
inline std::string tiny_run(const std::string& name, const std::string& sets) {
  const std::string dir = scratch_path("tiny_runs", name);
  const CliRun r = run_tfm("train --config configs/tiny.json --out " + dir +
                           " --set model.d_model=8 --set model.n_layers=1 --set model.n_heads=2"
                           " --set model.max_seq_len=8 --set train.max_steps=4 " +
                           sets);
  INFO(r.out);
  REQUIRE(r.status == 0);
  return dir;
}

// causal_lm on tests/data/tiny_shakespeare.txt (char vocabulary of 56).
inline const std::string& causal_run() {
  static const std::string dir = tiny_run("causal", "--set train.seq_len=8");
  return dir;
}

// masked_lm on the same text.
inline const std::string& masked_run() {
  static const std::string dir =
      tiny_run("masked", "--set train.seq_len=8 --set train.objective=masked_lm --set model.causal=false");
  return dir;
}

// seq2seq (word vocabularies) on write_reversal_pairs' toy translations: 200 pairs, 20 of them val.
inline const std::string& seq2seq_run() {
  static const std::string dir = [] {
    const std::string data = write_reversal_pairs(scratch_path("tiny_runs", "pairs"), 200);
    return tiny_run("seq2seq",
                    "--set train.seq_len=null --set train.objective=seq2seq --set data.tokenizer=word "
                    "--set data.path=" +
                        data);
  }();
  return dir;
}

}  // namespace tfm_test
