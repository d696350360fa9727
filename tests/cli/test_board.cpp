// `tfm runs` and `tfm board` end to end, on run directories the test trains or damages: a finished run,
// one stopped at its target, one with a corrupt checkpoint and one with a cut metrics line. The board's
// JSON API per endpoint, then hostile HTTP: traversal spellings, oversized request line and headers, a
// stalled half request, 50 concurrent clients, and SIGINT.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint_bytes.h"
#include "cli_run.h"
#include "tiny_runs.h"

namespace fs = std::filesystem;
using nlohmann::json;
using tfm_test::run_tfm;

namespace {

// Trains the tiny model of tests/tiny_runs.h into root/name with extra `sets`.
void board_train(const std::string& root, const std::string& name, const std::string& sets) {
  const tfm_test::CliRun r =
      run_tfm("train --config configs/tiny.json --out " + root + "/" + name +
              " --set model.d_model=8 --set model.n_layers=1 --set model.n_heads=2 --set model.max_seq_len=8"
              " --set train.seq_len=8 --set train.max_steps=6 --set train.eval_interval=3 --set "
              "train.log_interval=1 " +
              sets);
  INFO(r.out);
  REQUIRE(r.status == 0);
}

// The four runs: done, target (stopped at train.target_loss), corrupt (checkpoints cut), cut_metrics.
const std::string& board_runs_root() {
  static const std::string root = [] {
    const std::string dir = tfm_test::scratch_path("board", "runs");
    board_train(dir, "done", "");
    board_train(dir, "target", "--set train.target_loss=100");
    board_train(dir, "corrupt", "--set train.optimizer.lr=0.01");
    for (const char* f : {"last.ckpt", "best.ckpt"}) fs::resize_file(dir + "/corrupt/" + f, 100);
    board_train(dir, "cut_metrics", "");
    std::ofstream(dir + "/cut_metrics/metrics.jsonl", std::ios::app) << "{\"step\": 7, \"train_lo";
    return dir;
  }();
  return root;
}

// A `tfm board` process on a free port, stopped (SIGINT) at scope exit if still running.
struct BoardProcess {
  pid_t pid = -1;
  int port = 0;
  std::string log;
  explicit BoardProcess(const std::string& args) {
    log = tfm_test::scratch_path("board", "log_" + std::to_string(::getpid()));
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const std::string cmd =
          "exec " + tfm_test::tfm_command() + " board --port 0 " + args + " > '" + log + "' 2>&1";
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // "tfm board: http://HOST:PORT/ ..."
    for (int i = 0; i < 200 && port == 0; ++i) {
      const std::string out = tfm_test::read_file(log);
      const size_t at = out.find("http://");
      const size_t slash = at == std::string::npos ? std::string::npos : out.find('/', at + 7);
      if (slash != std::string::npos)
        port = std::stoi(out.substr(out.rfind(':', slash) + 1));
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    INFO(tfm_test::read_file(log));
    REQUIRE(port > 0);
  }
  // SIGINT, then the exit status (-1 when it did not stop within 10 s).
  int stop() {
    if (pid <= 0) return -1;
    ::kill(pid, SIGINT);
    for (int i = 0; i < 200; ++i) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
    return -1;
  }
  ~BoardProcess() { stop(); }
};

json board_get(httplib::Client& c, const std::string& path, int expected = 200) {
  const auto res = c.Get(path.c_str());
  REQUIRE(res);
  INFO(path << " -> " << res->status << " " << res->body);
  CHECK(res->status == expected);
  return json::parse(res->body, nullptr, false);
}

json board_post(httplib::Client& c, const std::string& path, const json& body, int expected = 200) {
  const auto res = c.Post(path.c_str(), body.dump(), "application/json");
  REQUIRE(res);
  INFO(path << " " << body.dump() << " -> " << res->status << " " << res->body);
  CHECK(res->status == expected);
  return json::parse(res->body, nullptr, false);
}

// Whether `answer` holds a whole HTTP response: its head and as many body bytes as Content-Length says.
bool whole_response(const std::string& answer) {
  const size_t head_end = answer.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  std::string head = answer.substr(0, head_end);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  const size_t field = head.find("\r\ncontent-length:");
  if (field == std::string::npos) return false;  // a body that ends when the server closes
  const size_t length = std::strtoull(head.c_str() + field + 17, nullptr, 10);
  return answer.size() >= head_end + 4 + length;
}

// Sends `request` raw and returns the server's answer (up to 64 KiB, 10 s): its first whole response, so
// that a connection the server keeps open is not waited on; with `until_close`, all it sends before it
// closes the connection.
std::string board_raw(int port, const std::string& request, bool until_close = false) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while (out.size() < 65536 && (n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    if (!until_close && whole_response(out)) break;
  }
  ::close(fd);
  return out;
}

// The name the board lists a run of board_runs_root() by: the root's own name, then the run's.
std::string board_name(const std::string& run) {
  return fs::path(board_runs_root()).filename().string() + "/" + run;
}

const json& board_run(const json& listing, const std::string& name) {
  for (const json& r : listing["runs"])
    if (r["name"] == name) return r;
  FAIL("no run " << name << " in " << listing.dump());
  return listing;
}

}  // namespace

TEST_CASE("tfm runs: the table, --json, --sort and --diff on trained and damaged runs", "[board][slow]") {
  const std::string& root = board_runs_root();
  tfm_test::CliRun r = run_tfm("runs " + root);
  INFO(r.out);
  REQUIRE(r.status == 0);
  for (const char* want : {"runs/done ", "finished", "stopped: target", "runs/corrupt ", "checkpoint",
                           "runs/cut_metrics", "unreadable line"})
    CHECK(r.out.find(want) != std::string::npos);

  r = run_tfm("runs " + root + " --json --sort best_val_loss");
  REQUIRE(r.status == 0);
  const json runs = json::parse(r.out);
  REQUIRE(runs.size() == 4);
  for (size_t i = 1; i < runs.size(); ++i)
    if (!runs[i]["best_val_loss"].is_null()) CHECK(runs[i - 1]["best_val_loss"] <= runs[i]["best_val_loss"]);

  // A run whose config.json is damaged: its step budget is unknown, not 0.
  const std::string bad = tfm_test::scratch_path("board", "bad_config");
  fs::create_directories(bad);
  fs::copy(root + "/done", bad + "/run", fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::ofstream(bad + "/run/config.json") << "{bad";
  r = run_tfm("runs " + bad);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("6/? ") && Catch::Contains("config.json: not valid JSON"));

  r = run_tfm("runs " + root + " --sort speed");
  CHECK(r.status == 2);
  CHECK(r.out.find("--sort") != std::string::npos);
  CHECK(run_tfm("runs " + root + "/nowhere").status == 2);
  r = run_tfm("runs configs/tiny.json");  // a file that exists: said so, not "no such directory"
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("configs/tiny.json: a file, not a directory of runs"));

  r = run_tfm("runs --diff " + root + "/done " + root + "/target");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("train.target_loss") != std::string::npos);
  CHECK(r.out.find("best_val_loss") != std::string::npos);
  CHECK(r.out.find("model.d_model") == std::string::npos);  // equal keys are not listed
  r = run_tfm("runs --json --diff " + root + "/done " + root + "/corrupt");
  REQUIRE(r.status == 0);
  const json diff = json::parse(r.out);
  REQUIRE(diff["config"].size() == 1);
  CHECK(diff["config"][0]["key"] == "train.optimizer.lr");
  r = run_tfm("runs --diff " + root + "/done " + root + "/corrupt");
  CHECK_THAT(r.out, Catch::Contains("train.optimizer.lr"));
  CHECK_THAT(r.out, !Catch::Contains("000000000"));  // floats at 10 digits, not their binary tail
  CHECK(run_tfm("runs --diff " + root + "/done " + root + "/nowhere").status == 2);
}

TEST_CASE("tfm runs --diff: any number of runs, the mean train loss, a run without its config",
          "[board][slow]") {
  const std::string& root = board_runs_root();
  // Three runs, a column each (CLI11 had refused a third: "At Most 2 required but received 3").
  tfm_test::CliRun r = run_tfm("runs --diff " + root + "/done " + root + "/target " + root + "/corrupt");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("C: " + root + "/corrupt") && Catch::Contains("train.target_loss") &&
                        Catch::Contains("train.optimizer.lr"));
  // The train loss train.log's last line and loss.svg show (the interval's mean), named as such.
  CHECK_THAT(r.out, Catch::Contains("train_loss_avg (mean of the last interval)"));
  r = run_tfm("runs --json --diff " + root + "/done " + root + "/target " + root + "/corrupt");
  REQUIRE(r.status == 0);
  json diff = json::parse(r.out);
  CHECK(diff["runs"].size() == 3);
  REQUIRE(diff["config"].size() == 2);
  CHECK(diff["config"][0]["key"] == "train.optimizer.lr");
  CHECK(diff["config"][0]["values"].size() == 3);
  const std::string metrics = tfm_test::read_file(root + "/done/metrics.jsonl");
  const json last = json::parse(metrics.substr(metrics.rfind('\n', metrics.size() - 2) + 1));
  CHECK(diff["metrics"]["train_loss_avg"][0] == last["train_loss_avg"]);
  CHECK(diff["metrics"]["train_loss"][0] == last["train_loss"]);

  // Past the limit, or one run: said in tfm's words.
  std::string many;
  for (int i = 0; i < 17; ++i) many += " " + root + "/done";
  r = run_tfm("runs --diff" + many);
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--diff: compares 2 to 16 runs, got 17"));
  r = run_tfm("runs --diff " + root + "/done");
  CHECK(r.status == 2);
  CHECK_THAT(r.out, Catch::Contains("--diff: compares 2 to 16 runs, got 1"));

  // A run without config.json: compared on its metrics, its config named missing.
  const std::string bare = tfm_test::scratch_path("board", "bare");
  fs::copy(root + "/target", bare, fs::copy_options::recursive);
  fs::remove(bare + "/config.json");
  r = run_tfm("runs --diff " + root + "/done " + bare);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("config.json: missing") && Catch::Contains("best_val_loss") &&
                        Catch::Contains("config: not compared"));
  r = run_tfm("runs --json --diff " + root + "/done " + bare);
  REQUIRE(r.status == 0);
  diff = json::parse(r.out);
  CHECK(diff["config"].empty());
  CHECK(diff["problems"][1] == "config.json: missing");
  CHECK(diff["metrics"]["step"] == json({6, 3}));  // `target` stopped at its first evaluation
}

TEST_CASE("tfm board: the JSON API per endpoint on finished, stopped, corrupt and cut runs",
          "[board][slow]") {
  const std::string& root = board_runs_root();
  BoardProcess board("--runs " + root);
  httplib::Client c("127.0.0.1", board.port);
  c.set_read_timeout(60, 0);

  const json listing = board_get(c, "/api/runs");
  REQUIRE(listing["runs"].size() == 4);
  CHECK(board_run(listing, board_name("done"))["status"] == "finished");
  CHECK(board_run(listing, board_name("done"))["step"] == 6);
  CHECK(board_run(listing, board_name("target"))["status"] == "stopped: target");
  CHECK(board_run(listing, board_name("corrupt"))["status"] == "interrupted");
  // Both cut checkpoints named: last.ckpt (what --resume reads) and best.ckpt (what sample reads).
  const json corrupt = board_run(listing, board_name("corrupt"))["problems"];
  REQUIRE(corrupt.size() == 2);
  CHECK(corrupt[0].get<std::string>().find("last.ckpt") != std::string::npos);
  CHECK(corrupt[1].get<std::string>().find("best.ckpt") != std::string::npos);
  CHECK(board_run(listing, board_name("cut_metrics"))["problems"][0].get<std::string>().find(
            "metrics.jsonl") == 0);

  json m = board_get(c, "/api/metrics?run=" + board_name("done"));
  CHECK(m["series"]["train_loss"]["step"] == json({1, 2, 3, 4, 5, 6}));
  CHECK(m["series"]["val_loss"]["step"] == json({3, 6}));
  CHECK(m["last_step"] == 6);
  m = board_get(c, "/api/metrics?run=" + board_name("done") + "&since=4");
  CHECK(m["series"]["train_loss"]["step"] == json({5, 6}));
  m = board_get(c, "/api/metrics?run=" + board_name("done") + "&max_points=2");
  CHECK(m["series"]["train_loss"]["step"].size() == 2);
  CHECK(board_get(c, "/api/metrics?run=" + board_name("cut_metrics"))["skipped_lines"] == 1);
  board_get(c, "/api/metrics?run=" + board_name("done") + "&since=x", 400);
  board_get(c, "/api/metrics?run=nothing", 404);

  CHECK(board_get(c, "/api/config?run=" + board_name("done"))["config"]["model"]["d_model"] == 8);
  const json d = board_get(c, "/api/diff?run=" + board_name("done") + "&run=" + board_name("target") +
                                  "&run=" + board_name("corrupt"));
  REQUIRE(d["keys"].size() == 2);
  CHECK(d["keys"][0]["key"] == "train.optimizer.lr");
  CHECK(d["keys"][1]["key"] == "train.target_loss");
  board_get(c, "/api/diff?run=" + board_name("done"), 400);

  const auto log = c.Get(("/api/file?run=" + board_name("done") + "&path=train.log").c_str());
  REQUIRE(log);
  CHECK(log->status == 200);
  CHECK(log->body.find("tfm train") != std::string::npos);
  board_get(c, "/api/file?run=" + board_name("done") + "&path=last.ckpt", 403);  // weights are not served

  json s =
      board_post(c, "/api/model/sample", {{"run", board_name("done")}, {"prompt", "RO"}, {"max_tokens", 5}});
  CHECK(s["prompt"] == "RO");
  CHECK(!s["text"].get<std::string>().empty());
  // A top-k past the vocabulary keeps every token (sampling.h's table, as for tfm sample's --top-k): the
  // text of top_k 0, the default, with the same seed.
  const json all_k =
      board_post(c, "/api/model/sample",
                 {{"run", board_name("done")}, {"prompt", "RO"}, {"max_tokens", 5}, {"top_k", 1000}});
  CHECK(all_k["text"] == s["text"]);
  CHECK(board_post(c, "/api/model/sample", {{"run", board_name("done")}, {"top_k", -1}}, 400)["error"] ==
        "top_k: expected an integer >= 0, got -1");
  // A JSON string has its escapes read already: a prompt's "\n" is a newline, and a backslash the
  // JSON held stays one (this vocabulary has none: refused by name), not read as a second escape.
  s = board_post(c, "/api/model/sample",
                 {{"run", board_name("done")}, {"prompt", "RO\nME"}, {"max_tokens", 2}});
  CHECK(s["prompt"] == "RO\nME");
  CHECK_THAT(board_post(c, "/api/model/sample", {{"run", board_name("done")}, {"prompt", "RO\\nME"}}, 400)
                 .value("error", std::string()),
             Catch::Contains("character '\\' (U+005C) at character 2"));
  s = board_post(c, "/api/model/attention", {{"run", board_name("done")}, {"text", "ROMEO"}});
  REQUIRE(s["layers"].size() == 1);
  CHECK(s["layers"][0]["probabilities"].size() == 2);  // heads
  CHECK(s["layers"][0]["output_similarity"].size() == 2);
  CHECK(s["tokens"].size() == 5);
  board_post(c, "/api/model/sample", {{"run", board_name("done")}, {"max_tokens", 100000}}, 400);
  board_post(c, "/api/model/sample", {{"run", board_name("done")}, {"prompt", std::string(5000, 'a')}}, 400);
  board_post(c, "/api/model/fill_mask", {{"run", board_name("done")}, {"text", "a[MASK]"}},
             400);                                                            // a causal_lm run
  board_post(c, "/api/model/sample", {{"run", board_name("corrupt")}}, 409);  // its checkpoints are cut
  board_post(c, "/api/model/sample", {{"run", "../etc"}}, 404);
  const auto bad_body = c.Post("/api/model/sample", "not json", "application/json");
  REQUIRE(bad_body);
  CHECK(bad_body->status == 400);
  board_get(c, "/api/nothing", 404);
  CHECK(c.Get("/")->body.find("tfm board") != std::string::npos);
  CHECK(c.Get("/static/chart.js")->status == 200);
  CHECK(board.stop() == 0);
}

TEST_CASE("tfm board: traversal, oversized and stalled requests, 50 clients, SIGINT", "[board][slow]") {
  const std::string& root = board_runs_root();
  // A symlink inside a run that leads out of it.
  std::error_code ec;
  fs::create_symlink("/etc/passwd", root + "/done/escape.txt", ec);
  BoardProcess board("--runs " + root);
  httplib::Client c("127.0.0.1", board.port);

  for (const std::string& path : std::vector<std::string>{
           "/api/file?run=" + board_name("done") + "&path=../target/train.log",
           "/api/file?run=" + board_name("done") + "&path=%2e%2e/target/train.log",
           "/api/file?run=" + board_name("done") + "&path=..%2ftarget%2ftrain.log",
           "/api/file?run=" + board_name("done") + "&path=/etc/passwd",
           "/api/file?run=" + board_name("done") + "&path=%2fetc%2fpasswd",
           "/api/file?run=" + board_name("done") + "&path=escape.txt", "/api/file?run=..&path=etc/passwd",
           "/api/file?run=" + board_name("done") + "&path=", "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
           "/static/..%2f..%2fCMakeLists.txt", "/static/../board.js"}) {
    const auto res = c.Get(path.c_str());
    REQUIRE(res);
    INFO(path << " -> " << res->status << " " << res->body.substr(0, 200));
    CHECK(res->status >= 400);
    CHECK(res->status < 500);
    CHECK(res->body.find("root:") == std::string::npos);
  }
  // Another Host (DNS rebinding) is refused.
  CHECK(board_raw(board.port, "GET /api/runs HTTP/1.1\r\nHost: evil.example:80\r\nConnection: close\r\n\r\n")
            .rfind("HTTP/1.1 403", 0) == 0);
  // An oversized request line and an oversized header: refused, not served.
  const std::string long_line = board_raw(
      board.port, "GET /api/runs?x=" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  CHECK(long_line.find("HTTP/1.1 200") == std::string::npos);
  const std::string long_header =
      board_raw(board.port, "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(20000, 'b') +
                                "\r\n\r\n");
  CHECK(long_header.find("HTTP/1.1 200") == std::string::npos);
  // More header lines than kBoardMaxHeadLines, each short, and a head past kBoardMaxHeadBytes in lines
  // under httplib's 8 KiB each: 400, and the server goes on serving.
  std::string many_headers = "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 500; ++i) many_headers += "X-H" + std::to_string(i) + ": v\r\n";
  const std::string too_many = board_raw(board.port, many_headers + "\r\n");
  CHECK(too_many.rfind("HTTP/1.1 400", 0) == 0);
  std::string big_head = "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; i < 6; ++i)
    big_head += "X-Big" + std::to_string(i) + ": " + std::string(7000, 'h') + "\r\n";
  const std::string too_big = board_raw(board.port, big_head + "\r\n");
  CHECK(too_big.rfind("HTTP/1.1 400", 0) == 0);
  // The connection ends with the refusal: the rest of the refused head, and a request after it, are
  // never read as the connection's next requests (one answer, then the connection closes).
  const std::string hidden = "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  for (const std::string& refused : {many_headers, big_head}) {
    const std::string answer = board_raw(board.port, refused + "\r\n" + hidden, true);
    INFO(answer.substr(0, 400));
    CHECK(answer.rfind("HTTP/1.1 400", 0) == 0);
    CHECK(answer.find("HTTP/1.1", 1) == std::string::npos);
  }
  CHECK(c.Get("/api/runs")->status == 200);
  // Keep-alive: each request of a connection gets its own bounds, so many requests of a few headers pass.
  std::string pipelined;
  for (int i = 0; i < 20; ++i) pipelined += "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: 1\r\n\r\n";
  const std::string answers = board_raw(
      board.port, pipelined + "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", true);
  size_t oks = 0;
  for (size_t at = answers.find("HTTP/1.1 200"); at != std::string::npos;
       at = answers.find("HTTP/1.1 200", at + 1))
    ++oks;
  CHECK(oks == 21);
  const std::string big_body = board_raw(
      board.port, "POST /api/model/sample HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n{");
  CHECK(big_body.rfind("HTTP/1.1 413", 0) == 0);

  // A stalled half request is dropped within the read timeout, while others are served meanwhile.
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stalled([&] { board_raw(board.port, "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"); });
  CHECK(c.Get("/api/runs")->status == 200);
  stalled.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(9));

  // 50 clients polling at once.
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 50; ++i)
    clients.emplace_back([&, i] {
      httplib::Client mine("127.0.0.1", board.port);
      mine.set_read_timeout(20, 0);
      for (int k = 0; k < 4; ++k) {
        const std::string path = i % 2 ? "/api/runs" : "/api/metrics?run=" + board_name("done") + "&since=2";
        const auto res = mine.Get(path.c_str());
        (res && res->status == 200 ? ok : failed)++;
      }
    });
  for (std::thread& t : clients) t.join();
  CHECK(ok == 200);
  CHECK(failed == 0);

  CHECK(board.stop() == 0);
  CHECK(tfm_test::read_file(board.log).find("tfm board: stopped") != std::string::npos);
}

TEST_CASE("tfm runs, board and plot: runs of the same name under two roots are told apart", "[board][slow]") {
  // ../A/runs/tiny and ../B/runs/tiny, of different configs: both had been "runs/tiny", and the board's
  // routes reached only one of them.
  const std::string root = tfm_test::scratch_path("board", "alike");
  fs::create_directories(root + "/A/runs");
  fs::create_directories(root + "/B/runs");
  fs::copy(board_runs_root() + "/done", root + "/A/runs/tiny", fs::copy_options::recursive);
  fs::copy(board_runs_root() + "/target", root + "/B/runs/tiny", fs::copy_options::recursive);
  tfm_test::CliRun r = run_tfm("runs " + root + "/A/runs " + root + "/B/runs --json");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json runs = json::parse(r.out);
  REQUIRE(runs.size() == 2);
  CHECK(runs[0]["name"] == "A/runs/tiny");
  CHECK(runs[1]["name"] == "B/runs/tiny");

  BoardProcess board("--runs " + root + "/A/runs " + root + "/B/runs");
  httplib::Client c("127.0.0.1", board.port);
  const json listing = board_get(c, "/api/runs");
  REQUIRE(listing["runs"].size() == 2);
  CHECK(board_run(listing, "A/runs/tiny")["status"] == "finished");
  CHECK(board_run(listing, "B/runs/tiny")["status"] == "stopped: target");
  CHECK(board_get(c, "/api/config?run=A/runs/tiny")["config"]["train"].value("target_loss", 0.0) == 0.0);
  CHECK(board_get(c, "/api/config?run=B/runs/tiny")["config"]["train"]["target_loss"] == 100.0);
  board_get(c, "/api/config?run=runs/tiny", 404);
  CHECK(board.stop() == 0);

  // Their loss curves overlaid: a legend entry each, not two "tiny".
  const std::string svg = root + "/ab.svg";
  r = run_tfm("plot loss " + root + "/A/runs/tiny " + root + "/B/runs/tiny --out " + svg);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string figure = tfm_test::read_file(svg);
  CHECK_THAT(figure, Catch::Contains(">A/runs/tiny<") && Catch::Contains(">B/runs/tiny<"));
}

TEST_CASE(
    "tfm runs and board: a checkpoint state field of the wrong type is one run's problem, not the list's",
    "[board][slow]") {
  // Damage never stops the list (docs/board.md): the run is listed with its problem named, as a cut
  // checkpoint is, and the other runs as they are.
  const std::string root = tfm_test::scratch_path("board", "state_type");
  fs::create_directories(root);
  for (const char* name : {"good", "bad"})
    fs::copy(board_runs_root() + "/done", root + "/" + name, fs::copy_options::recursive);
  const std::string ckpt = root + "/bad/last.ckpt";
  const std::string damaged =
      tfm_test::with_edited_state(tfm_test::read_file(ckpt), [](json& state) { state["step"] = "6"; });
  std::ofstream(ckpt, std::ios::binary) << damaged;
  const std::string problem = ckpt + ": corrupt checkpoint: the state's \"step\" is \"6\"";
  const std::string good = fs::path(root).filename().string() + "/good";
  const std::string bad = fs::path(root).filename().string() + "/bad";

  tfm_test::CliRun r = run_tfm("runs " + root);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains(good + " ") && Catch::Contains(bad + ": " + problem));
  CHECK_THAT(r.out, !Catch::Contains("internal error"));

  BoardProcess board("--runs " + root);
  httplib::Client c("127.0.0.1", board.port);
  const json listing = board_get(c, "/api/runs");
  REQUIRE(listing["runs"].size() == 2);
  CHECK(board_run(listing, good)["status"] == "finished");
  CHECK(board_run(listing, bad)["status"] == "interrupted");
  const json problems = board_run(listing, bad)["problems"];
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].get<std::string>(), Catch::StartsWith(problem));
  CHECK(board.stop() == 0);
}

TEST_CASE("tfm board: a downsampled series keeps its newest point", "[board]") {
  // 4000 logged steps, cut to 2000 points a series: grad_norm had ended at step 3998 and tokens_per_s at
  // 3999 while last_step said 4000, and the page, polling past 4000, never got their last points.
  tfm_test::TempDir tmp("board_downsample");
  fs::create_directories(tmp.path + "/long");
  std::ofstream metrics(tmp.path + "/long/metrics.jsonl");
  for (int step = 1; step <= 4000; ++step)
    metrics << json{{"step", step},
                    {"train_loss", 3.0 + std::sin(step)},
                    {"grad_norm", 1.0 + std::sin(0.7 * step)},
                    {"tokens_per_s", 1000.0 + std::cos(step)}}
                   .dump()
            << "\n";
  metrics.close();
  BoardProcess board("--runs " + tmp.path);
  httplib::Client c("127.0.0.1", board.port);
  const std::string run = fs::path(tmp.path).filename().string() + "/long";
  const json m = board_get(c, "/api/metrics?run=" + run);
  CHECK(m["last_step"] == 4000);
  for (const char* key : {"train_loss", "grad_norm", "tokens_per_s"}) {
    INFO(key);
    const json& steps = m["series"][key]["step"];
    CHECK(steps.size() <= 2000);
    CHECK(steps.front() == 1);
    CHECK(steps.back() == 4000);
  }
  CHECK(board.stop() == 0);
}

TEST_CASE("tfm board: a run resumed from an earlier checkpoint is fetched anew", "[board][slow]") {
  // A run killed at step 8 whose last checkpoint is at 6 (`done`, with two records past it: loss 99),
  // then `tfm train --resume`, which rewrites metrics.jsonl after step 6. A page holding step 8 had polled
  // since=8 for ever: it kept the dead steps' points and never got the new ones.
  const std::string root = tfm_test::scratch_path("board", "resumed");
  fs::create_directories(root);
  fs::copy(board_runs_root() + "/done", root + "/run", fs::copy_options::recursive);
  {
    std::ofstream metrics(root + "/run/metrics.jsonl", std::ios::app);
    for (int step : {7, 8})
      metrics << json{{"step", step}, {"train_loss", 99.0}, {"elapsed_s", 1.0}}.dump() << "\n";
  }
  BoardProcess board("--runs " + root);
  httplib::Client c("127.0.0.1", board.port);
  c.set_read_timeout(60, 0);
  const std::string run = "/api/metrics?run=" + fs::path(root).filename().string() + "/run";
  json m = board_get(c, run);
  REQUIRE(m["last_step"] == 8);
  CHECK(m["reset"] == false);
  const std::string id = m["last_id"];
  CHECK(id.size() == 16);
  // Nothing new: the same record at step 8, no points.
  m = board_get(c, run + "&since=8&since_id=" + id);
  CHECK(m["reset"] == false);
  CHECK(m["series"].empty());
  CHECK(m["last_id"] == id);

  const tfm_test::CliRun resumed = run_tfm("train --resume " + root + "/run --set train.max_steps=8");
  INFO(resumed.out);
  REQUIRE(resumed.status == 0);
  m = board_get(c, run + "&since=8&since_id=" + id);
  CHECK(m["reset"] == true);
  CHECK(m["since"] == -1);
  CHECK(m["series"]["train_loss"]["step"] == json({1, 2, 3, 4, 5, 6, 7, 8}));
  for (const json& v : m["series"]["train_loss"]["value"]) CHECK(v.get<double>() < 99.0);
  CHECK(m["last_id"] != id);
  // Polled on from the new record: nothing new, no reset. Without since_id, the old answer (no check).
  m = board_get(c, run + "&since=8&since_id=" + m["last_id"].get<std::string>());
  CHECK(m["reset"] == false);
  CHECK(m["series"].empty());
  CHECK(board_get(c, run + "&since=8")["reset"] == false);
  // A log rewritten to fewer steps than the page holds (the resumed run not yet at step 8): anew too.
  const std::string kept = tfm_test::read_file(root + "/run/metrics.jsonl");
  size_t at = 0;
  for (int line = 0; line < 6; ++line) at = kept.find('\n', at) + 1;
  std::ofstream(root + "/run/metrics.jsonl", std::ios::trunc) << kept.substr(0, at);
  m = board_get(c, run + "&since=8&since_id=" + id);
  CHECK(m["reset"] == true);
  CHECK(m["last_step"] == 6);
  CHECK(board.stop() == 0);
}

TEST_CASE("tfm board: errors say what is wrong with the request, with the status that fits",
          "[board][slow]") {
  const std::string& root = board_runs_root();
  BoardProcess board("--runs " + root);
  httplib::Client c("127.0.0.1", board.port);
  const auto message = [](const json& reply) { return reply.value("error", std::string()); };
  // No run named: 400 "run: missing", not 404 for a run called "".
  for (const char* path : {"/api/metrics", "/api/config", "/api/file?path=train.log", "/api/metrics?run="}) {
    INFO(path);
    CHECK_THAT(message(board_get(c, path, 400)), Catch::StartsWith("run: missing"));
  }
  CHECK_THAT(message(board_post(c, "/api/model/sample", {{"prompt", "RO"}}, 400)),
             Catch::StartsWith("run: missing"));
  board_post(c, "/api/model/sample", {{"run", 3}}, 400);
  // A file that is not there is 404; one outside the run, or not served, stays 403.
  const std::string done = "/api/file?run=" + board_name("done") + "&path=";
  CHECK_THAT(message(board_get(c, done + "nofile.json", 404)), Catch::Contains("no such file"));
  board_get(c, done + "sub/nofile.json", 404);
  board_get(c, done + "../nofile.json", 403);
  board_get(c, done + "last.ckpt", 403);
  // Another method on a route: 405 naming the one it answers, before any body is read.
  for (const auto& [request, allow] : std::vector<std::pair<std::string, std::string>>{
           {"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", "GET, HEAD"},
           {"DELETE /api/config?run=x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", "GET, HEAD"},
           {"GET /api/model/sample HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", "POST"}}) {
    const std::string answer = board_raw(board.port, request);
    INFO(request << " -> " << answer);
    CHECK(answer.rfind("HTTP/1.1 405", 0) == 0);
    CHECK_THAT(answer, Catch::Contains("Allow: " + allow + "\r\n"));
  }
  // A refusal comes before the body is read, and ends the connection: a body that holds a request is
  // never read as the connection's next one (one answer, then the connection closes).
  const std::string inner = "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  for (const std::string& refused :
       {std::string("POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
        std::string("POST /api/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n"),
        std::string("POST /api/model/sample HTTP/1.1\r\nHost: evil.example\r\n")}) {
    const std::string answer = board_raw(
        board.port, refused + "Content-Length: " + std::to_string(inner.size()) + "\r\n\r\n" + inner, true);
    INFO(refused << " -> " << answer);
    CHECK(answer.rfind("HTTP/1.1 4", 0) == 0);
    CHECK_THAT(answer, Catch::Contains("Connection: close\r\n") && !Catch::Contains("HTTP/1.1 200"));
  }
  const auto posted = c.Post("/api/runs", "{}", "application/json");
  REQUIRE(posted);
  CHECK(posted->status == 405);
  CHECK(board_get(c, "/api/nothing", 404)["error"] == "no such page");
  // A body past the limit: 413 saying the limit.
  const auto big = c.Post("/api/model/sample", std::string(70 * 1024, ' '), "application/json");
  REQUIRE(big);
  CHECK(big->status == 413);
  CHECK_THAT(big->body, Catch::Contains("64 KiB"));
  CHECK(c.Get("/api/runs")->status == 200);
  CHECK(board.stop() == 0);
}

TEST_CASE("tfm board: refuses a missing directory and warns when opened to the network", "[board]") {
  tfm_test::CliRun r = run_tfm("board --runs /nonexistent_tfm_dir --port 0");
  CHECK(r.status == 2);
  CHECK(r.out.find("--runs /nonexistent_tfm_dir") != std::string::npos);
  r = run_tfm("board --port 70000");
  CHECK(r.status == 2);
  CHECK(r.out.find("--port") != std::string::npos);
  tfm_test::TempDir tmp("board_host");
  BoardProcess board("--runs " + tmp.path + " --host 0.0.0.0");
  CHECK(board.stop() == 0);
  CHECK(tfm_test::read_file(board.log).find("anyone who can reach this port") != std::string::npos);
}

TEST_CASE("tfm board: fill-mask of a masked_lm run and translation of a seq2seq run", "[board][slow]") {
  // tests/tiny_runs.h's runs, copied under a root of their own.
  const std::string root = tfm_test::scratch_path("board", "objectives");
  fs::create_directories(root);
  fs::copy(tfm_test::masked_run(), root + "/masked", fs::copy_options::recursive);
  fs::copy(tfm_test::seq2seq_run(), root + "/seq2seq", fs::copy_options::recursive);
  const std::string prefix = fs::path(root).filename().string() + "/";
  BoardProcess board("--runs " + root);
  httplib::Client c("127.0.0.1", board.port);
  c.set_read_timeout(60, 0);

  json r = board_post(c, "/api/model/fill_mask",
                      {{"run", prefix + "masked"}, {"text", "To b[MASK]"}, {"top_k", 3}});
  REQUIRE(r["masks"].size() == 1);
  CHECK(r["masks"][0]["position"] == 4);
  REQUIRE(r["masks"][0]["candidates"].size() == 3);
  double total = 0;
  for (const json& cand : r["masks"][0]["candidates"]) total += cand["probability"].get<double>();
  CHECK(total > 0);
  CHECK(total <= 1.0 + 1e-6);
  // The request's field is named, not tfm fill-mask's flag.
  const json no_mask =
      board_post(c, "/api/model/fill_mask", {{"run", prefix + "masked"}, {"text", "no mask here"}}, 400);
  CHECK_THAT(no_mask["error"].get<std::string>(), Catch::StartsWith("text: no [MASK]"));
  board_post(c, "/api/model/sample", {{"run", prefix + "masked"}, {"prompt", "To"}}, 400);  // not a causal_lm
  r = board_post(c, "/api/model/attention", {{"run", prefix + "masked"}, {"text", "To be"}});
  CHECK(r["layers"].size() == 1);

  r = board_post(c, "/api/model/translate",
                 {{"run", prefix + "seq2seq"}, {"text", "one two ."}, {"beam", 2}});
  CHECK(r["text"] == "one two .");
  CHECK(r["translation"].is_string());
  CHECK(r["warnings"] == json::array());
  // A text longer than data.max_source_len: translated as far as the model reads, and said so.
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "one two ";
  r = board_post(c, "/api/model/translate", {{"run", prefix + "seq2seq"}, {"text", long_text}});
  REQUIRE(r["warnings"].size() == 1);
  CHECK_THAT(r["warnings"][0].get<std::string>(),
             Catch::Contains("text: 80 tokens; the model reads the first "));
  board_post(c, "/api/model/translate", {{"run", prefix + "seq2seq"}, {"text", "one ."}, {"beam", 99}}, 400);
  board_post(c, "/api/model/translate", {{"run", prefix + "masked"}, {"text", "one ."}}, 400);
  r = board_post(c, "/api/model/attention", {{"run", prefix + "seq2seq"}, {"text", "one two ."}});
  CHECK(r["kind"] == "seq2seq");
  CHECK(r["source_tokens"].size() >= 3);
  CHECK(r["cross"].size() == 1);  // one decoder layer
  CHECK(board.stop() == 0);
}

TEST_CASE("tfm runs and board: every logged number is served, accuracy and BLEU shown", "[board][slow]") {
  // seq2seq logs val_accuracy and val_bleu, masked_lm val_accuracy: /api/metrics served a fixed list
  // without them, and neither tfm runs, its --diff nor the board showed them.
  const std::string root = tfm_test::scratch_path("board", "scores");
  fs::create_directories(root);
  fs::copy(tfm_test::masked_run(), root + "/masked", fs::copy_options::recursive);
  fs::copy(tfm_test::seq2seq_run(), root + "/seq2seq", fs::copy_options::recursive);
  // A run logging more keys than the board serves series: 64 of them, and said so.
  fs::create_directories(root + "/wide");
  {
    std::ofstream wide(root + "/wide/metrics.jsonl");
    json rec = {{"step", 1}};
    for (int k = 0; k < 70; ++k) rec["k" + std::to_string(100 + k)] = k;
    wide << rec.dump() << "\n";
  }
  const std::string prefix = fs::path(root).filename().string() + "/";
  BoardProcess board("--runs " + root);
  httplib::Client c("127.0.0.1", board.port);
  json m = board_get(c, "/api/metrics?run=" + prefix + "seq2seq");
  for (const char* key : {"val_accuracy", "val_bleu", "train_loss_avg", "ms_per_step"}) {
    INFO(key);
    CHECK(!m["series"][key]["value"].empty());
  }
  CHECK(m["series_left_out"] == false);
  m = board_get(c, "/api/metrics?run=" + prefix + "masked");
  CHECK(!m["series"]["val_accuracy"]["value"].empty());
  CHECK(!m["series"].contains("val_bleu"));
  m = board_get(c, "/api/metrics?run=" + prefix + "wide");
  CHECK(m["series"].size() == 64);
  CHECK(m["series_left_out"] == true);
  const json listing = board_get(c, "/api/runs");
  CHECK(board_run(listing, prefix + "seq2seq")["best_val_bleu"].is_number());
  CHECK(board_run(listing, prefix + "seq2seq")["best_val_accuracy"].is_number());
  CHECK(board_run(listing, prefix + "masked")["best_val_accuracy"].is_number());
  CHECK(board_run(listing, prefix + "masked")["best_val_bleu"].is_null());
  CHECK(board.stop() == 0);

  tfm_test::CliRun r = run_tfm("runs " + root);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("val acc") && Catch::Contains("val BLEU"));
  r = run_tfm("runs " + root + " --sort best_val_bleu --json");
  REQUIRE(r.status == 0);
  CHECK(json::parse(r.out)[0]["name"] == prefix + "seq2seq");
  r = run_tfm("runs --diff " + root + "/masked " + root + "/seq2seq");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("val_accuracy") && Catch::Contains("val_bleu"));
  // A causal_lm table has no such columns.
  r = run_tfm("runs " + board_runs_root());
  CHECK_THAT(r.out, !Catch::Contains("val BLEU"));
}

TEST_CASE("tfm board: model requests to many runs at once are all counted out", "[board][slow]") {
  // A run slow enough to sample that requests overlap (512 tokens of a 64-wide model), and small runs
  // the board first sees while it samples: each new run grows the per-run request counters. They had
  // been a vector that a reference outlived: a grown vector left the waiting requests counting down
  // freed memory (AddressSanitizer: heap-use-after-free), and the run answered 429 "busy" for ever.
  const std::string root = tfm_test::scratch_path("board", "many");
  board_train(
      root, "slow",
      "--set model.d_model=64 --set model.n_heads=4 --set model.n_layers=2 --set model.max_seq_len=64 "
      "--set train.seq_len=32");
  for (int i = 0; i < 6; ++i)
    fs::copy(board_runs_root() + "/done", root + "/new" + std::to_string(i), fs::copy_options::recursive);
  const std::string prefix = fs::path(root).filename().string() + "/";
  BoardProcess board("--runs " + root);
  const auto post = [&](const std::string& run, int max_tokens) {
    httplib::Client c("127.0.0.1", board.port);
    c.set_read_timeout(120, 0);
    const auto res = c.Post("/api/model/sample",
                            json{{"run", prefix + run}, {"prompt", "RO"}, {"max_tokens", max_tokens}}.dump(),
                            "application/json");
    return res ? res->status : -1;
  };
  for (int i = 0; i < 6; ++i) {
    std::atomic<int> ok{0};
    std::vector<std::thread> clients;
    for (int k = 0; k < 2; ++k) clients.emplace_back([&] { ok += post("slow", 512) == 200; });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    clients.emplace_back([&, i] { ok += post("new" + std::to_string(i), 1) == 200; });
    for (std::thread& t : clients) t.join();
    CHECK(ok == 3);
  }
  for (int k = 0; k < 4; ++k) CHECK(post("slow", 1) == 200);  // nothing is left counted as waiting
  CHECK(board.stop() == 0);
}

TEST_CASE("tfm board: one board a port, links out of a run, damaged records, loopback hosts and prompts",
          "[board][slow]") {
  const std::string root = tfm_test::scratch_path("board", "edges");
  fs::create_directories(root);
  for (const char* run : {"good", "linked", "damaged"})
    fs::copy(board_runs_root() + "/done", root + "/" + run, fs::copy_options::recursive);
  // A config.json that leads out of the run: the run is not listed, and nothing of it is served.
  const std::string outside = tfm_test::scratch_path("board", "outside.json");
  std::ofstream(outside) << R"({"secret": "outside the roots"})";
  fs::remove(root + "/linked/config.json");
  fs::create_symlink(outside, root + "/linked/config.json");
  // A record whose step is not a number: skipped and named, the listing and `tfm runs` go on.
  std::ofstream(root + "/damaged/metrics.jsonl", std::ios::app) << "{\"step\": \"x\", \"train_loss\": 1.0}\n";
  const std::string prefix = fs::path(root).filename().string() + "/";

  BoardProcess board("--runs " + root);
  httplib::Client c("127.0.0.1", board.port);
  c.set_read_timeout(60, 0);
  const json listing = board_get(c, "/api/runs");
  CHECK(listing["runs"].size() == 2);
  CHECK(listing.dump().find("linked") == std::string::npos);
  board_get(c, "/api/config?run=" + prefix + "linked", 404);
  const json d = board_get(c, "/api/diff?run=" + prefix + "good&run=" + prefix + "linked", 404);
  CHECK(d.dump().find("secret") == std::string::npos);
  bool named = false;
  for (const json& r : listing["runs"])
    if (r["name"] == prefix + "damaged")
      named = r["problems"].dump().find("metrics.jsonl: 1 unreadable line") != std::string::npos;
  CHECK(named);
  const tfm_test::CliRun runs = run_tfm("runs " + root + "/damaged");
  INFO(runs.out);
  CHECK(runs.status == 0);

  // A prompt the vocabulary cannot encode is the request's fault: 400, not the checkpoint's 409.
  const json bad =
      board_post(c, "/api/model/sample", {{"run", prefix + "good"}, {"prompt", "\xc3\xa9"}}, 400);
  CHECK(bad["error"].get<std::string>().find("not in the vocabulary") != std::string::npos);
  // Host names are case-insensitive; a request with two Host headers is refused.
  CHECK(board_raw(board.port, "GET /api/runs HTTP/1.1\r\nHost: LOCALHOST\r\nConnection: close\r\n\r\n")
            .rfind("HTTP/1.1 200", 0) == 0);
  CHECK(board_raw(
            board.port,
            "GET /api/runs HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
            .rfind("HTTP/1.1 400", 0) == 0);

  // A second board on the same port is refused (httplib's default SO_REUSEPORT had let both listen,
  // answering in turn), and the first goes on serving.
  const tfm_test::CliRun second = run_tfm("board --runs " + root + " --port " + std::to_string(board.port));
  INFO(second.out);
  CHECK(second.status == 2);
  CHECK(second.out.find("cannot listen there") != std::string::npos);
  CHECK(c.Get("/api/runs")->status == 200);
  CHECK(board.stop() == 0);

  // Any 127.x address is loopback: served to the Host it is reached by, and no network warning.
  BoardProcess other("--runs " + root + " --host 127.0.0.2");
  CHECK(tfm_test::read_file(other.log).find("anyone who can reach") == std::string::npos);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(other.port));
  REQUIRE(::inet_pton(AF_INET, "127.0.0.2", &addr.sin_addr) == 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string request = "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.2:" + std::to_string(other.port) +
                              "\r\nConnection: close\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buf[64] = {};
  const timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  CHECK(n > 0);
  CHECK(std::string(buf).rfind("HTTP/1.1 200", 0) == 0);
  CHECK(other.stop() == 0);
}
