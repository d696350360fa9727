// The helpers behind scripts/dev/profile.sh: perf's lines sorted into a step's parts (canned perf output,
// so the test needs neither perf nor the kernel's permission to sample).
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"

namespace {

void write_script_input(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("scripts: profile_categories.py sorts perf samples into a step's parts", "[scripts]") {
  tfm_test::TempDir tmp("scripts_profile");
  // A train.log whose steps 3-4 average 20 ms (steps up to 2 are skipped, as profile.sh asks).
  write_script_input(
      tmp.path + "/train.log",
      "[2026-11-23 16:53:07] [info] step 2/4 | loss 3.9 | lr 2.00e-04 | grad norm 1.6 | 90.0 ms/step | 1k "
      "tok/s\n"
      "[2026-11-23 16:53:07] [info] step 3/4 | loss 3.8 | lr 2.00e-04 | grad norm 1.6 | 18.0 ms/step | 1k "
      "tok/s\n"
      "[2026-11-23 16:53:07] [info] step 4/4 | val loss 3.7 (best 3.7)\n"
      "[2026-11-23 16:53:07] [info] step 4/4 | loss 3.7 | lr 2.00e-04 | grad norm 1.6 | 22.0 ms/step | 1k "
      "tok/s\n");
  // perf report --no-children --sort dso,sym -g none -t TAB; shares summing to 80% (perf's own
  // list is cut at a limit): the table is of the listed samples.
  write_script_input(tmp.path + "/perf.txt",
                     "# Samples: 10K of event 'cpu-clock'\n"
                     "    40.00%\t[JIT] tid 123\t[.] 0x00007f19dc2dc23c\n"
                     "     8.00%\ttfm\t[.] tfm::(anonymous namespace)::round_rows_bf16<unsigned short>\n"
                     "     8.00%\tlibmvec.so.1\t[.] _ZGVeN16v_erff_skx\n"
                     "     4.00%\ttfm\t[.] tfm::Tensor::full\n"
                     "     4.00%\tlibgomp.so.1.0.0\t[.] 0x000000000001f7da\n"
                     "     4.00%\ttfm\t[.] tfm::kernels::layernorm_backward\n"
                     "     4.00%\t[kernel.kallsyms]\t[k] clear_page_erms\n"
                     "     4.00%\ttfm\t[.] tfm::Tensor::backward\n"
                     "     4.00%\ttfm\t[.] tfm::(anonymous namespace)::adamw_range\n");
  const tfm_test::CliRun r =
      tfm_test::run_shell("/usr/bin/python3 scripts/dev/profile_categories.py '" + tmp.path +
                          "/train.log' 2 4 --json < '" + tmp.path + "/perf.txt'");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["ms_per_step"].get<double>() == Approx(20.0));
  const auto& s = j["shares"];
  CHECK(s["matrix products"].get<double>() == Approx(0.5));
  CHECK(s["bf16 rounding"].get<double>() == Approx(0.1));
  CHECK(s["GELU, exp, erf"].get<double>() == Approx(0.1));
  CHECK(s["memory: fills, copies, allocation"].get<double>() == Approx(0.05));
  CHECK(s["OpenMP runtime"].get<double>() == Approx(0.05));
  CHECK(s["norms, elementwise"].get<double>() == Approx(0.05));
  CHECK(s["OS kernel"].get<double>() == Approx(0.05));
  CHECK(s["optimizer, clipping"].get<double>() == Approx(0.05));
  CHECK(s["other"].get<double>() == Approx(0.05));
  CHECK(s["attention kernel"].get<double>() == 0.0);

  // No timed step after the skipped ones: a clear error, not a table of zeros.
  const tfm_test::CliRun none =
      tfm_test::run_shell("/usr/bin/python3 scripts/dev/profile_categories.py '" + tmp.path +
                          "/train.log' 4 4 < '" + tmp.path + "/perf.txt'");
  CHECK(none.status != 0);
  CHECK_THAT(none.out, Catch::Contains("no 'step K/N | ... ms/step' lines after step 4"));
}

TEST_CASE("scripts: recipe_variants.py writes configs tfm accepts, each with its option taken out",
          "[scripts]") {
  tfm_test::TempDir tmp("scripts_variants");
  // Every trick on, whatever the shipped config turns on: each then has its variant.
  const tfm_test::CliRun resolved = tfm_test::run_tfm(
      "config --config configs/shakespeare_speedrun.json --set model.value_residual=true"
      " --set model.bigram_buckets=4225 --set model.x0_skip=true --set model.logit_softcap=15"
      " --set train.optimizer.muon_momentum_warmup_steps=50 --set "
      "train.optimizer.muon_momentum_cooldown_steps=50"
      " --set train.optimizer.muon_weight_decay=0.1 --set train.optimizer.muon_cautious_weight_decay=true"
      " --set train.ema_decay=0.9 --set model.dropout=0 --set model.mtp_heads=1 > '" +
      tmp.path + "/full.json'");
  REQUIRE(resolved.status == 0);
  const tfm_test::CliRun r = tfm_test::run_shell("/usr/bin/python3 scripts/recipe_variants.py '" + tmp.path +
                                                 "/full.json' '" + tmp.path + "'");
  INFO(r.out);
  REQUIRE(r.status == 0);
  std::ifstream order_file(tmp.path +
                           "/order");  // full is the input, beside the variants as ablate.sh keeps it
  std::vector<std::string> order;
  for (std::string name; order_file >> name;) order.push_back(name);
  REQUIRE(order.size() == 20);  // full, nine single removals, default, nine tricks
  CHECK(order.front() == "full");
  CHECK(order[10] == "default");
  auto load = [&](const std::string& name) {
    // tfm resolves it: a variant that left a removed option's keys behind would be refused here.
    const tfm_test::CliRun c = tfm_test::run_tfm("config --config '" + tmp.path + "/" + name + ".json'");
    INFO(name << ": " << c.out);
    REQUIRE(c.status == 0);
    return nlohmann::json::parse(c.out);
  };
  const auto full = load("full");
  CHECK(full["model"]["positional_encoding"] == "rope");
  CHECK(load("no_rope")["model"]["positional_encoding"] == "sinusoidal");
  CHECK(load("no_rmsnorm")["model"]["norm"] == "layernorm");
  const auto gelu = load("no_swiglu");
  CHECK(gelu["model"]["activation"] == "gelu");
  CHECK(gelu["model"]["d_ff"].get<int>() == full["model"]["d_ff"].get<int>() * 3 / 2);
  CHECK(load("no_qk_norm")["model"]["qk_norm"] == false);
  CHECK(load("tied_head")["model"]["tie_embeddings"] == true);
  CHECK(load("biases")["model"]["bias"] == true);
  CHECK(load("adamw")["train"]["optimizer"]["name"] == "adamw");
  CHECK(load("adamw_lr1e-3")["train"]["optimizer"]["lr"].get<double>() == Approx(1e-3));
  CHECK(load("cosine")["train"]["lr_schedule"]["name"] == "cosine");
  const auto old = load("default");
  CHECK(old["model"]["positional_encoding"] == "sinusoidal");
  CHECK(old["model"]["norm"] == "layernorm");
  CHECK(old["model"]["activation"] == "gelu");
  CHECK(old["train"]["optimizer"]["name"] == "adamw");
  CHECK(old["train"]["lr_schedule"]["name"] == "cosine");
  CHECK(old["model"]["value_residual"] == false);
  CHECK(old["model"]["bigram_buckets"] == 0);
  CHECK(old["train"]["ema_decay"].get<double>() == 0.0);
  CHECK(old["model"]["dropout"].get<double>() == 0.0);  // dropout is not part of the modern recipe
  // Each trick's variant takes out that trick and only it.
  const auto no_vr = load("no_value_residual");
  CHECK(no_vr["model"]["value_residual"] == false);
  CHECK(no_vr["model"]["bigram_buckets"] == 4225);
  CHECK(load("no_bigram")["model"]["bigram_buckets"] == 0);
  CHECK(load("no_x0_skip")["model"]["x0_skip"] == false);
  CHECK(load("no_softcap")["model"]["logit_softcap"].get<double>() == 0.0);
  const auto constant = load("no_momentum_schedule")["train"]["optimizer"];
  CHECK(constant["muon_momentum_warmup_steps"] == 0);
  CHECK(constant["muon_momentum_cooldown_steps"] == 0);
  CHECK(constant["muon_weight_decay"].get<double>() == Approx(0.1));
  const auto no_wd = load("no_cautious_wd")["train"]["optimizer"];
  CHECK(no_wd["muon_weight_decay"].get<double>() == 0.0);
  CHECK(no_wd["muon_momentum_warmup_steps"] == 50);
  CHECK(load("no_ema")["train"]["ema_decay"].get<double>() == 0.0);
  CHECK(load("with_dropout")["model"]["dropout"].get<double>() == Approx(0.1));
  const auto no_mtp = load("no_mtp");
  CHECK(no_mtp["model"]["mtp_heads"] == 0);
  CHECK(no_mtp["model"]["bigram_buckets"] == 4225);
  // Everything else stays: the same shape, data and steps.
  for (const std::string& name : order) {
    const auto c = load(name);
    CHECK(c["model"]["d_model"] == full["model"]["d_model"]);
    CHECK(c["train"]["max_steps"] == full["train"]["max_steps"]);
    CHECK(c["data"] == full["data"]);
  }
}

TEST_CASE("scripts: tfm's figures are never written through a link or over a FIFO", "[scripts]") {
  tfm_test::TempDir tmp("save_figure");
  const std::string d = tmp.path;
  std::ofstream(d + "/outside") << "precious\n";
  std::ofstream(d + "/metrics.jsonl") << "{\"step\": 1, \"train_loss\": 3.5, \"lr\": 0.001}\n";
  REQUIRE(tfm_test::run_shell("ln -s '" + d + "/outside' '" + d + "/link.svg' && mkfifo '" + d + "/fifo.svg'")
              .status == 0);
  CHECK(tfm_test::run_tfm("plot loss '" + d + "' --out '" + d + "/ok.svg'").status == 0);
  CHECK(tfm_test::read_file(d + "/ok.svg").find("<svg") != std::string::npos);
  for (const std::string name : {"link.svg", "fifo.svg"}) {
    const tfm_test::CliRun r = tfm_test::run_shell("timeout -s KILL 30 " + tfm_test::tfm_command() +
                                                   " plot loss '" + d + "' --out '" + d + "/" + name + "'");
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains(name) && Catch::Contains("tfm writes only regular files"));
  }
  CHECK(tfm_test::read_file(d + "/outside") == "precious\n");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(d)) (void)e, ++entries;
  CHECK(entries == 5);  // outside, metrics.jsonl, link.svg, fifo.svg, ok.svg: no temporary left
}

TEST_CASE("scripts: a missing option value, --help and paths relative to where the user is", "[scripts]") {
  // Checked before anything is installed or built: exit 2 naming the option, or the help and exit 0.
  for (const std::string& args :
       {std::string("scripts/speedrun.sh --target"), std::string("scripts/ablate.sh --out"),
        std::string("scripts/speedrun.sh --figures"),
        std::string("scripts/train.sh configs/tiny.json --out")}) {
    const tfm_test::CliRun r = tfm_test::run_shell(args);
    INFO(args << "\n" << r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("needs a value"));
  }
  tfm_test::CliRun r = tfm_test::run_shell("scripts/train.sh --help");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("scripts/train.sh configs/tiny.json --set train.max_steps=50"));
  r = tfm_test::run_shell("scripts/train.sh no_such_config.json");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("no_such_config.json: no such config file"));
  // From another directory: the user's paths are theirs, a repository config is still found.
  tfm_test::TempDir tmp("scripts_paths");
  std::ofstream(tmp.path + "/mine.json") << "{}";
  r = tfm_test::run_shell(
      "cd '" + tmp.path + "' && bash -c 'source \"$0/scripts/common.sh\"; tfm_user_path out/run; " +
      "tfm_user_config mine.json; tfm_user_config configs/tiny.json; tfm_user_path /abs' '" + TFM_SOURCE_DIR +
      "'");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out == tmp.path + "/out/run\n" + tmp.path + "/mine.json\nconfigs/tiny.json\n/abs\n");
}

TEST_CASE("scripts: dev/ab.sh times two commands pair by pair and stops at one that fails", "[scripts]") {
  tfm_test::CliRun r = tfm_test::run_shell("scripts/dev/ab.sh -n 2 -w 0 true 'sh -c :'");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("\n   1 ") && Catch::Contains("\n   2 ") && !Catch::Contains("\n   3 "));
  CHECK_THAT(r.out, Catch::Contains("over 2 pairs (median, min-max)"));
  r = tfm_test::run_shell("scripts/dev/ab.sh -n 2 -w 0 true 'echo why; exit 3'");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("why\nab.sh: the command failed (exit 3): echo why; exit 3"));
  // B under a millisecond has no ratio: it is shown as "-" and left out of the median. Whether `true`
  // takes under a millisecond depends on the machine's load, so the pair's ratios are checked against
  // its printed times either way (a substring test for "0.000x" had failed on a "10.000x").
  r = tfm_test::run_shell("scripts/dev/ab.sh -n 1 -w 0 'sleep 0.01' true");
  INFO(r.out);
  CHECK(r.status == 0);
  const size_t pair_at = r.out.find("\n   1 ");
  REQUIRE(pair_at != std::string::npos);
  std::istringstream pair(r.out.substr(pair_at + 1));
  std::string n, wall_a, wall_b, wall_ratio, cpu_a, cpu_b, cpu_ratio;
  pair >> n >> wall_a >> wall_b >> wall_ratio >> cpu_a >> cpu_b >> cpu_ratio;
  const auto ratio_of = [](const std::string& a, const std::string& b) {  // "0.020s" over "0.002s"
    const double x = std::stod(a), y = std::stod(b);
    if (!(y > 0)) return std::string("-x");
    char text[32];
    std::snprintf(text, sizeof text, "%.3fx", x / y);
    return std::string(text);
  };
  CHECK(wall_ratio == ratio_of(wall_a, wall_b));
  CHECK(cpu_ratio == ratio_of(cpu_a, cpu_b));
  if (wall_ratio == "-x") CHECK_THAT(r.out, Catch::Contains("A/B wall: none (B took no measurable time)"));
  if (cpu_ratio == "-x") CHECK_THAT(r.out, Catch::Contains("cpu: none (B took no measurable time)"));
  r = tfm_test::run_shell("scripts/dev/ab.sh -n 0 true true");
  CHECK(r.status == 2);
  r = tfm_test::run_shell("scripts/dev/ab.sh --help");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("Usage: scripts/dev/ab.sh [-n PAIRS]"));
}
