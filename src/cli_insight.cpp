// tfm attention | export | tokenizer: looking inside a run and moving its weights out (issue 7).
#include "cli.h"

namespace tfm::cli {

std::vector<Command> add_insight_commands(CLI::App& app) {
  (void)app;
  return {};
}

}  // namespace tfm::cli
