// Commands beyond train/eval/sample/info/config, one family per file (src/cli_<family>.cpp), so the
// CLI grows without every change going through main.cpp.
#pragma once
#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

namespace tfm::cli {

// Exit statuses of every command.
constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;  // bad config, argument or file (tfm::ConfigError, tfm::IoError)
constexpr int kExitDiverged = 3;  // training stopped on a NaN/Inf

// A registered subcommand and what runs when the command line selected it (returns the exit status;
// tfm::ConfigError / tfm::IoError thrown from it become status 2 in main).
struct Command {
  CLI::App* app;
  std::function<int()> run;
};

std::vector<Command> add_bench_commands(CLI::App& app);    // cli_bench.cpp: bench gemm
std::vector<Command> add_insight_commands(CLI::App& app);  // cli_insight.cpp: attention, export, tokenizer
std::vector<Command> add_objective_commands(CLI::App& app);  // cli_objectives.cpp: fill-mask, translate

}  // namespace tfm::cli
