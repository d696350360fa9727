// `tfm config`: a config resolved (every default filled in), or the table of every key.
#include "tfm/config/config.h"

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "tfm/engine/error.h"

namespace tfm::cli {
namespace {

struct ConfigOptions {
  std::string config_file;
  std::vector<std::string> sets;
  bool keys = false;
};

int config_command(const ConfigOptions& o) {
  const std::string& file = o.config_file;
  const bool keys = o.keys;
  if (keys) {
    std::fputs(keys_markdown().c_str(), stdout);
    return kExitOk;
  }
  if (file.empty() && o.sets.empty())
    throw ConfigError(
        "config: give --config FILE (print it resolved), --set KEY=VALUE ... (the defaults with those keys "
        "changed) or --keys (list every key)");
  const Config config = load_config(file, o.sets);
  // What `tfm train` would warn of (a key set that nothing reads), said here where the config is checked.
  for (const std::string& warning : config_warnings(config))
    fmt::print(stderr, "tfm: warning: {}\n", warning.c_str());
  fmt::print("{}\n", config.tree.dump(2).c_str());
  return kExitOk;
}

}  // namespace

std::vector<Command> add_config_commands(CLI::App& app) {
  auto o = std::make_shared<ConfigOptions>();
  auto* cfg =
      app.add_subcommand("config", "Print a config resolved (every default filled in), or the key table");
  auto* config = cfg->add_option("--config", o->config_file, "JSON config (without one: every key's default)")
                     ->type_name("FILE");
  auto* set = cfg->add_option("--set", o->sets, "Override a key (repeatable)")->type_name("KEY=VALUE");
  // The key table is the same for every config: --keys with one would read as that config's keys.
  cfg->add_flag("--keys", o->keys, "List every key: type, default, allowed values, meaning (Markdown)")
      ->excludes(config)
      ->excludes(set);
  cfg->footer(
      "\nExamples:\n  tfm config --config configs/tiny.json --set model.d_model=64\n"
      "  tfm config --set data.path=notes.txt   # the config tfm train --set data.path=notes.txt trains\n"
      "  tfm config --keys > keys.md\n");
  return {{cfg, [o] { return config_command(*o); }}};
}

}  // namespace tfm::cli
