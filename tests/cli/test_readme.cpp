// The documentation against the code, so the two cannot drift (docs/config.md's key table is checked in
// tests/config/test_config.cpp): the C++ of README.md and docs/*.md is quoted from examples/ (which build
// with the tests), the README's shell lines use only flags their command takes, and every relative link of
// README.md and docs/*.md points at a file.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"

namespace {

namespace fs = std::filesystem;

std::string source_file(const std::string& relative) {
  const std::string path = std::string(TFM_SOURCE_DIR) + "/" + relative;
  INFO(path);
  REQUIRE(fs::is_regular_file(path));
  return tfm_test::read_file(path);
}

std::vector<std::string> lines_of_readme(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

// The fenced blocks of Markdown `text` opened with ```LANG, each as its lines.
std::vector<std::vector<std::string>> fenced_blocks(const std::string& text, const std::string& lang) {
  std::vector<std::vector<std::string>> blocks;
  bool inside = false, wanted = false;
  for (const std::string& line : lines_of_readme(text)) {
    if (line.rfind("```", 0) == 0) {
      if (inside) {
        inside = false;
      } else {
        inside = true;
        wanted = line.substr(3) == lang;
        if (wanted) blocks.emplace_back();
      }
    } else if (inside && wanted) {
      blocks.back().push_back(line);
    }
  }
  return blocks;
}

bool contains_run(const std::vector<std::string>& lines, const std::vector<std::string>& run) {
  if (run.empty() || run.size() > lines.size()) return false;
  for (size_t i = 0; i + run.size() <= lines.size(); ++i)
    if (std::equal(run.begin(), run.end(), lines.begin() + static_cast<std::ptrdiff_t>(i))) return true;
  return false;
}

}  // namespace

TEST_CASE("docs: every C++ block of README.md and docs/*.md is quoted from a program in examples/",
          "[readme][docs]") {
  // The examples build with the tests and against an install (scripts/dev/check_install.sh): a block
  // quoted from one compiles. A sketch that is not meant to compile is no ```cpp block.
  std::map<std::string, std::vector<std::string>> examples;  // examples/NAME/main.cpp -> its lines
  for (const auto& dir : fs::directory_iterator(std::string(TFM_SOURCE_DIR) + "/examples")) {
    const std::string name = "examples/" + dir.path().filename().string() + "/main.cpp";
    if (fs::is_regular_file(std::string(TFM_SOURCE_DIR) + "/" + name))
      examples[name] = lines_of_readme(source_file(name));
  }
  REQUIRE(examples.count("examples/engine/main.cpp") == 1);
  std::vector<std::string> pages = {"README.md"};
  for (const auto& e : fs::directory_iterator(std::string(TFM_SOURCE_DIR) + "/docs"))
    if (e.path().extension() == ".md") pages.push_back("docs/" + e.path().filename().string());
  std::map<std::string, int> quoted;  // page -> its blocks
  for (const std::string& page : pages) {
    for (const auto& block : fenced_blocks(source_file(page), "cpp")) {
      ++quoted[page];
      std::string where;
      for (const auto& [name, lines] : examples)
        if (contains_run(lines, block)) where = name;
      INFO(page << "'s C++ block starting \"" << (block.empty() ? "" : block.front())
                << "\" is not a run of lines of any examples/*/main.cpp");
      CHECK(!where.empty());
    }
  }
  CHECK(quoted["README.md"] >= 1);
  CHECK(quoted["docs/seq2seq.md"] == 3);
  CHECK(quoted["docs/internals.md"] == 2);
}

TEST_CASE("readme: every flag of a tfm command in a shell block is one the command takes", "[readme][docs]") {
  const std::regex tfm_word(R"((^|[\s/|])tfm\s+(.*))");
  const std::regex flag(R"((^|[\s\[])(--[a-z][a-z0-9-]*))");
  std::map<std::string, std::string> help;  // "sample" or "bench gemm" -> its --help
  int checked = 0;
  for (const auto& block : fenced_blocks(source_file("README.md"), "sh")) {
    for (const std::string& line : block) {
      std::smatch m;
      if (!std::regex_search(line, m, tfm_word)) continue;
      std::string rest = m[2].str();
      const size_t comment = rest.find("  #");
      if (comment != std::string::npos) rest.resize(comment);
      std::istringstream words(rest);
      std::string command, sub;
      words >> command >> sub;
      // A subcommand ("bench gemm", "data prepare") is a plain word that has a help of its own.
      const bool has_sub = std::regex_match(sub, std::regex("[a-z]+")) &&
                           tfm_test::run_tfm(command + " " + sub + " --help").status == 0;
      const std::string key = has_sub ? command + " " + sub : command;
      if (!help.count(key)) {
        const tfm_test::CliRun h = tfm_test::run_tfm(key + " --help");
        INFO("README.md: " << line);
        REQUIRE(h.status == 0);
        help[key] = h.out;
      }
      for (auto it = std::sregex_iterator(rest.begin(), rest.end(), flag); it != std::sregex_iterator();
           ++it) {
        const std::string f = (*it)[2].str();
        const std::regex listed(f + "[^a-z0-9-]");
        INFO("README.md: " << line << "\n`tfm " << key << " --help` does not list " << f);
        CHECK(std::regex_search(help[key], listed));
        ++checked;
      }
    }
  }
  CHECK(help.size() >= 10);  // the tour names most commands
  CHECK(checked >= 20);
}

TEST_CASE("docs: every relative link in README.md and docs/*.md points at a file", "[readme][docs]") {
  std::vector<std::string> pages = {"README.md"};
  for (const auto& e : fs::directory_iterator(std::string(TFM_SOURCE_DIR) + "/docs"))
    if (e.path().extension() == ".md") pages.push_back("docs/" + e.path().filename().string());
  const std::regex link(R"(\]\(([^)#\s]+)(#[^)]*)?\))");
  int checked = 0;
  for (const std::string& page : pages) {
    const std::string text = source_file(page);
    const fs::path dir = fs::path(TFM_SOURCE_DIR) / fs::path(page).parent_path();
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[1].str();
      if (target.find("://") != std::string::npos) continue;  // a web page
      INFO(page << " links to " << target << ", which does not exist");
      CHECK(fs::exists(dir / target));
      ++checked;
    }
  }
  CHECK(checked >= 20);
}
