// `tfm CMD --help` teaches CMD by its own examples: every command and command group, found by walking
// the "Subcommands:" lists from `tfm --help`, shows examples of itself (not the global tour), and every
// flag an example of it uses is one of its options. On the same walk, no command suggests --help for
// llama.cpp's --temp.
#include <catch2/catch.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"

namespace {

using tfm_test::run_tfm;

// The names listed under "Subcommands:" in a help text.
std::vector<std::string> subcommands_of(const std::string& help) {
  std::vector<std::string> names;
  std::istringstream in(help);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line == "Subcommands:") {
      inside = true;
    } else if (inside) {
      if (line.empty()) break;
      std::istringstream words(line);
      std::string name;
      words >> name;
      names.push_back(name);
    }
  }
  return names;
}

// The flags of a help text's "Options:" section ("--run", "--top-k", ...).
std::set<std::string> options_of(const std::string& help) {
  std::set<std::string> flags;
  const std::string options = help.substr(0, help.find("\nSubcommands:"));
  static const std::regex flag(R"((?:^|[ ,])(--[a-z][a-z0-9-]*))");
  std::istringstream in(options);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("  -", 0) == 0)  // an option row, not its wrapped description
      for (std::sregex_iterator it(line.begin(), line.end(), flag), end; it != end; ++it)
        flags.insert((*it)[1]);
  return flags;
}

// The example lines of a help text: its lines that start with "  tfm ".
std::vector<std::string> examples_of(const std::string& help) {
  std::vector<std::string> lines;
  std::istringstream in(help);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("  tfm ", 0) == 0) lines.push_back(line.substr(2));
  return lines;
}

}  // namespace

TEST_CASE("cli: every command's help shows its own examples, with flags it has", "[cli][help]") {
  const tfm_test::CliRun top = run_tfm("--help");
  REQUIRE(top.status == 0);
  const size_t global_examples = examples_of(top.out).size();
  REQUIRE(global_examples >= 10);  // the tour of every family

  std::vector<std::string> commands = subcommands_of(top.out);
  REQUIRE(commands.size() >= 15);
  for (size_t i = 0; i < commands.size(); ++i) {
    const std::string command = commands[i];  // a copy: the loop appends to commands
    const tfm_test::CliRun r = run_tfm(command + " --help");
    INFO("tfm " << command << " --help\n" << r.out);
    REQUIRE(r.status == 0);
    const std::vector<std::string> children = subcommands_of(r.out);
    for (const std::string& child : children) commands.push_back(command + " " + child);

    const std::vector<std::string> examples = examples_of(r.out);
    CHECK(examples.size() < global_examples);  // not the inherited tour
    const std::set<std::string> flags = options_of(r.out);
    int own = 0;
    for (const std::string& example : examples) {
      if (example.rfind("tfm " + command, 0) != 0) continue;  // an example of a neighbour command
      const std::string rest = example.substr(4 + command.size());
      if (!rest.empty() && rest[0] != ' ') continue;  // "tfm train" is not "tfm train-x"
      ++own;
      if (!children.empty()) continue;  // a group's examples use its children's flags
      static const std::regex used(R"((?:^| )(--[a-z][a-z0-9-]*))");
      const std::string args = rest.substr(0, rest.find('#'));  // a trailing comment is prose
      for (std::sregex_iterator it(args.begin(), args.end(), used), end; it != end; ++it) {
        INFO("example: " << example);
        CHECK(flags.count((*it)[1]) == 1);
      }
    }
    CHECK(own >= 1);
  }
}

// A flag a command does not have is named with the one meant, by one function for every command: llama.cpp's
// --temp is no command's --help (two edits from it), and no value after it is "not expected".
TEST_CASE("cli: no command takes llama.cpp's --temp for --help", "[cli][help][flags]") {
  std::vector<std::string> commands = subcommands_of(run_tfm("--help").out);
  for (size_t i = 0; i < commands.size(); ++i) {
    const std::string command = commands[i];  // a copy: the loop appends to commands
    for (const std::string& child : subcommands_of(run_tfm(command + " --help").out))
      commands.push_back(command + " " + child);
  }
  REQUIRE(commands.size() >= 20);
  for (const std::string& c : commands) {
    const tfm_test::CliRun r = run_tfm(c + " --temp 0.5");
    INFO("tfm " << c << " --temp 0.5\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("--temp is not a flag of tfm " + c));
    CHECK_THAT(r.out, !Catch::Contains("--help?") && !Catch::Contains("not expected"));
  }
}

namespace {

// Every `tfm sweep` example of `text` (help lines starting "  tfm sweep", README lines "tfm sweep"),
// continuation lines ("\" at the end) joined, comments cut.
std::vector<std::string> sweep_examples_of(const std::string& text) {
  std::vector<std::string> examples;
  std::istringstream in(text);
  std::string line;
  bool continued = false;
  while (std::getline(in, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) {
      continued = false;
      continue;
    }
    std::string words = line.substr(start);
    if (!continued && words.rfind("tfm sweep ", 0) != 0) continue;
    words = words.substr(0, words.find('#'));
    continued = !words.empty() && words.find_last_not_of(' ') != std::string::npos &&
                words[words.find_last_not_of(' ')] == '\\';
    if (continued) words = words.substr(0, words.find_last_not_of(' '));
    if (examples.empty() || words.rfind("tfm sweep ", 0) == 0)
      examples.push_back(words);
    else
      examples.back() += " " + words;
  }
  return examples;
}

}  // namespace

// A sweep example that a point of its grid refuses (a config that pins a key the grid's values do not
// fit) fails at once for whoever copies it: every point of every example resolves, as `tfm config`.
TEST_CASE("cli: every point of every sweep example in the help and the README resolves", "[cli][help]") {
  std::vector<std::string> examples;
  for (const std::string& text : {run_tfm("--help").out, run_tfm("sweep --help").out,
                                  tfm_test::read_file(std::string(TFM_SOURCE_DIR) + "/README.md")})
    for (const std::string& e : sweep_examples_of(text)) examples.push_back(e);
  REQUIRE(examples.size() >= 4);
  for (const std::string& example : examples) {
    std::istringstream words(example.substr(std::string("tfm sweep").size()));
    std::string config, word, value;
    std::vector<std::string> sets;
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;
    while (words >> word) {
      if (word == "--config") words >> config;
      if (word == "--set") words >> value, sets.push_back(value);
      if (word == "--grid") {
        words >> value;
        const size_t eq = value.find('=');
        std::vector<std::string> values;
        std::istringstream list(value.substr(eq + 1));
        for (std::string v; std::getline(list, v, ',');) values.push_back(v);
        axes.emplace_back(value.substr(0, eq), values);
      }
    }
    INFO("example: " << example);
    REQUIRE(!config.empty());
    REQUIRE(!axes.empty());
    // The grid's product, point by point (an odometer over the axes).
    std::vector<size_t> at(axes.size(), 0);
    for (bool more = true; more;) {
      std::string command = "config --config " + config;
      for (const std::string& s : sets) command += " --set " + s;
      for (size_t a = 0; a < axes.size(); ++a)
        command += " --set " + axes[a].first + "=" + axes[a].second[at[a]];
      const tfm_test::CliRun r = run_tfm(command);
      INFO("tfm " << command << "\n" << r.out);
      CHECK(r.status == 0);
      more = false;
      for (size_t a = 0; a < axes.size() && !more; ++a)
        if (++at[a] < axes[a].second.size())
          more = true;
        else
          at[a] = 0;
    }
  }
}
