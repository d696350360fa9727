// `tfm board`'s server (tfm-board): a local web page of the runs under some directories (cpp-httplib,
// Debian's libcpp-httplib-dev): the runs table, their curves while they train, config diffs, result
// files, and the model itself (models.cpp). The page is share/board/ (installed to share/tfm/board/); its
// charts are Debian's libjs-chart.js, read from /usr/share/javascript/chart.js/: nothing is fetched.
//
// Safe by default: it listens on 127.0.0.1 unless --host says otherwise; it only reads; runs are named
// by the names it listed, never by a path from the request; a file is served only from inside a listed
// run (or result) directory, after its real path is checked to stay there; requests are bounded in size
// and time; model work is capped and queued (board.h).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "board.h"
#include "tfm/analysis/runs.h"
#include "tfm/data/token_cache.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/platform.h"
#include "tfm/engine/strings.h"
#include "tfm/training/run_dir.h"
#include "tfm/training/run_lock.h"

namespace tfm::board {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxBodyBytes = 64 * 1024;         // a model request's JSON
constexpr uint64_t kMaxServedFileBytes = 32 << 20;  // a result file (sweep.jsonl, a figure)
constexpr size_t kDefaultMaxPoints = 2000;          // per series, before the server downsamples
constexpr size_t kMaxMaxPoints = 100000;
constexpr int kServerThreads = 64;  // > 50 polling clients with keep-alive connections

// share/board/NAME: PREFIX/share/tfm/board beside an installed binary, else the sources' share/board
// (platform::data_directories).
std::string find_board_asset(const std::string& name) {
  const std::vector<std::string> dirs = platform::data_directories("board", TFM_SOURCE_BOARD_DIR);
  std::error_code ec;
  for (const std::string& d : dirs)
    if (fs::is_regular_file(fs::path(d) / name, ec)) return (fs::path(d) / name).string();
  std::string places;
  for (const std::string& d : dirs) places += (places.empty() ? "" : ", ") + d;
  throw IoError("tfm board: the page's file " + name + " is in none of " + places + " (reinstall tfm)");
}

// A small file's text, "" when it is missing or unreadable (a run being written or deleted).
std::string read_part_of(const std::string& path) {
  try {
    return read_file(path, 16 << 20);
  } catch (const Error&) {
    return "";
  }
}

std::string dump(const json& j) {
  // Token text from a byte-level vocabulary may be invalid UTF-8: replaced, never an exception.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}
void reply_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(dump(j), "application/json");
}
void reply_error(httplib::Response& res, int status, const std::string& message) {
  reply_json(res, {{"error", message}}, status);
}

// A directory's files (name, size, time) and its lock holder: changes whenever the run does.
std::string dir_signature(const std::string& dir) {
  std::string sig;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto t = fs::last_write_time(it->path(), ec);
    const auto size = it->is_regular_file(ec) ? it->file_size(ec) : 0;
    sig += it->path().filename().string() + ":" + std::to_string(size) + ":" +
           std::to_string(t.time_since_epoch().count()) + ";";
  }
  return sig + "lock:" + std::to_string(RunLock::holder(dir));
}

std::string file_inside(const std::string& dir, const std::string& rel);
// Whether every one of the run's own files (run_file_names()) that is a symlink stays inside the run: a
// run with one that leads out is not listed, so that nothing of it (a summary, its config, a metric) is
// read from outside the roots.
bool stays_inside(const std::string& dir);

// The runs under the roots, each summary and metrics log cached until its directory changes.
class RunIndex {
 public:
  explicit RunIndex(std::vector<std::string> roots) : roots_(std::move(roots)) {}

  // Every run now (summaries recomputed only for the runs that changed) and the result sets.
  json listing() {
    std::vector<NamedRun> found = list_names();
    json runs = json::array();
    for (const NamedRun& r : found) runs.push_back(run_summary_json(summary(r.dir, r.name)));
    json results = json::array();
    for (json& set : find_result_sets(roots_)) results.push_back(std::move(set));
    std::lock_guard<std::mutex> lock(mutex_);
    results_.clear();
    for (const json& set : results) results_[set["name"].get<std::string>()] = set["dir"].get<std::string>();
    return {{"roots", roots_}, {"runs", runs}, {"results", results}};
  }

  // The directory of the run (or result set) the listing names `name`; "" when there is none.
  std::string dir_of(const std::string& name, bool results_too = false) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto it = names_.find(name);
        if (it != names_.end()) return it->second;
        const auto r = results_.find(name);
        if (results_too && r != results_.end()) return r->second;
      }
      if (attempt == 0) results_too ? (void)listing() : (void)list_names();  // a run that appeared since
    }
    return "";
  }

  RunSummary summary(const std::string& dir, const std::string& name) {
    const std::string sig = dir_signature(dir);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = summaries_.find(dir);
      if (it != summaries_.end() && it->second.first == sig) {
        RunSummary s = it->second.second;
        s.name = name;  // a run found since under another root may have lengthened it
        return s;
      }
    }
    RunSummary s = summarize_run(dir, name);
    std::lock_guard<std::mutex> lock(mutex_);
    summaries_[dir] = {sig, s};
    return s;
  }

  // The run's metrics log, read again only when metrics.jsonl changed.
  std::shared_ptr<const MetricsLog> metrics(const std::string& dir) {
    const std::string path = file_inside(dir, kMetricsFile);  // "" when missing: an empty log
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    const auto t = fs::last_write_time(path, ec);
    const std::string sig = std::to_string(ec ? -1 : static_cast<long long>(size)) + ":" +
                            std::to_string(t.time_since_epoch().count());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = metrics_.find(dir);
      if (it != metrics_.end() && it->second.first == sig) return it->second.second;
    }
    auto log = std::make_shared<const MetricsLog>(read_metrics(path));
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_[dir] = {sig, log};
    return log;
  }

  const std::vector<std::string>& roots() const { return roots_; }

 private:
  std::vector<NamedRun> list_names() {
    // Unique names, the same as `tfm runs` shows: two roots' runs/tiny are A/runs/tiny and B/runs/tiny.
    std::vector<NamedRun> found = find_named_runs(roots_, stays_inside);
    std::lock_guard<std::mutex> lock(mutex_);
    names_.clear();
    for (const NamedRun& r : found) names_[r.name] = r.dir;
    return found;
  }

  std::vector<std::string> roots_;
  std::mutex mutex_;
  std::map<std::string, std::string> names_, results_;
  std::map<std::string, std::pair<std::string, RunSummary>> summaries_;
  std::map<std::string, std::pair<std::string, std::shared_ptr<const MetricsLog>>> metrics_;
};

// Every numeric key of the records is a series the page can chart (against step and wall time), up to
// kMaxSeries of them; their points together at most kMaxPointsInAll, each series' share cut down by
// downsample_min_max: an answer costs what the eight fixed series of old could.
constexpr size_t kMaxSeries = 64;
constexpr size_t kMaxPointsInAll = 8 * kMaxMaxPoints;

// What a poller holds its last point by: the hash (xxHash64) of the last record at `step` as JSON, "" when
// there is none. A resumed run rewrites metrics.jsonl from its checkpoint's step on, and the record at a step
// the page holds is then another (its times differ) or absent.
std::string record_id(const MetricsLog& log, int64_t step) {
  for (auto it = log.records.rbegin(); it != log.records.rend(); ++it) {
    const auto s = it->find("step");
    if (s == it->end() || !s->is_number_integer() || s->get<int64_t>() != step) continue;
    const std::string text = dump(*it);
    return fmt::format("{:016x}", hash64(text.data(), text.size()));
  }
  return "";
}

// The series past `since`; all of them, with "reset": true, when the record the poller holds at `since`
// (`since_id`, the last_id it was given) is no longer the log's: the log was rewritten (a resume from an
// earlier checkpoint), and the points it holds past the checkpoint are gone.
json metrics_reply(const std::string& name, const MetricsLog& log, int64_t since, const std::string& since_id,
                   size_t max_points) {
  const bool reset = since >= 0 && !since_id.empty() && record_id(log, since) != since_id;
  if (reset) since = -1;
  struct Points {
    std::vector<double> step, time, value;
  };
  std::map<std::string, Points> found;  // by key, sorted
  bool left_out = false;                // a key past kMaxSeries
  for (const json& rec : log.records) {
    const auto s = rec.find("step");
    if (s == rec.end() || !s->is_number() || s->get<int64_t>() <= since) continue;
    const auto elapsed = rec.find("elapsed_s");
    const double time = elapsed != rec.end() && elapsed->is_number() ? elapsed->get<double>() : 0.0;
    for (auto v = rec.begin(); v != rec.end(); ++v) {
      if (!v->is_number() || v.key() == "step") continue;
      auto at = found.find(v.key());
      if (at == found.end()) {
        if (found.size() >= kMaxSeries) {
          left_out = true;
          continue;
        }
        at = found.emplace(v.key(), Points{}).first;
      }
      at->second.step.push_back(s->get<double>());
      at->second.time.push_back(time);
      at->second.value.push_back(v->get<double>());
    }
  }
  const size_t per_series =
      std::max<size_t>(2, std::min(max_points, kMaxPointsInAll / std::max<size_t>(found.size(), 1)));
  json series = json::object();
  int64_t last_step = since;
  size_t points = 0;
  for (const auto& [key, p] : found) {
    points = std::max(points, p.step.size());
    last_step = std::max(last_step, static_cast<int64_t>(p.step.back()));
    json s = {{"step", json::array()}, {"time", json::array()}, {"value", json::array()}};
    for (size_t i : downsample_min_max(p.value, per_series)) {
      s["step"].push_back(p.step[i]);
      s["time"].push_back(p.time[i]);
      s["value"].push_back(std::isfinite(p.value[i]) ? json(p.value[i]) : json(nullptr));
    }
    series[key] = std::move(s);
  }
  return {{"run", name},
          {"since", since},
          {"reset", reset},
          {"last_step", last_step},
          {"last_id", record_id(log, last_step)},
          {"points", points},
          {"max_points", per_series},
          {"series_left_out", left_out},
          {"skipped_lines", log.skipped_lines},
          {"missing", log.missing},
          {"series", series}};
}

// A query parameter as an integer in [lo, hi], else `fallback` when absent; ConfigError naming it.
int64_t query_integer(const httplib::Request& req, const char* key, int64_t fallback, int64_t lo,
                      int64_t hi) {
  if (!req.has_param(key)) return fallback;
  const std::string text = req.get_param_value(key);
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < lo || v > hi)
    throw ConfigError(std::string(key) + ": expected an integer in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "], got \"" + text + "\"");
  return v;
}

// dir's real path (symlinks resolved) when `rel` may name something inside it: not empty, not absolute,
// no ".." part, no NUL or backslash; none otherwise (or when dir cannot be resolved).
std::optional<fs::path> base_for(const std::string& dir, const std::string& rel) {
  if (rel.empty() || rel.front() == '/' || rel.find('\0') != std::string::npos ||
      rel.find('\\') != std::string::npos)
    return std::nullopt;
  for (const fs::path& part : fs::path(rel))
    if (part == "..") return std::nullopt;
  std::error_code ec;
  fs::path base = fs::canonical(dir, ec);
  if (ec) return std::nullopt;
  return base;
}

// Whether the resolved path `real` stays inside the resolved directory `base`.
bool within(const fs::path& base, const fs::path& real) {
  return std::mismatch(base.begin(), base.end(), real.begin(), real.end()).first == base.end();
}

// The file `rel` inside `dir`, or "" when it must not be served: a name base_for refuses, or whose real
// path (symlinks resolved) leaves dir's real path, or not a regular file.
std::string file_inside(const std::string& dir, const std::string& rel) {
  const std::optional<fs::path> base = base_for(dir, rel);
  if (!base) return "";
  std::error_code ec;
  const fs::path real = fs::canonical(*base / rel, ec);
  if (ec || !within(*base, real) || !fs::is_regular_file(real, ec)) return "";
  return real.string();
}

// Whether `rel` names nothing inside `dir` (to answer 404, not 403): a name base_for takes whose every
// existing part stays inside dir's real path and which is not there.
bool missing_inside(const std::string& dir, const std::string& rel) {
  const std::optional<fs::path> base = base_for(dir, rel);
  if (!base) return false;
  std::error_code ec;
  // The existing part resolved (symlinks and all), the rest appended: a link leading out stays refused.
  const fs::path real = fs::weakly_canonical(*base / rel, ec);
  return !ec && within(*base, real) && !fs::exists(fs::symlink_status(*base / rel, ec));
}

const char* content_type_of(const std::string& path) {
  static const std::map<std::string, const char*> types = {{".json", "application/json"},
                                                           {".jsonl", "text/plain; charset=utf-8"},
                                                           {".log", "text/plain; charset=utf-8"},
                                                           {".txt", "text/plain; charset=utf-8"},
                                                           {".csv", "text/plain; charset=utf-8"},
                                                           {".md", "text/plain; charset=utf-8"},
                                                           {".svg", "image/svg+xml"},
                                                           {".png", "image/png"}};
  const auto it = types.find(fs::path(path).extension().string());
  return it == types.end() ? nullptr : it->second;
}

// Whether --host is this machine's loopback only: 127.0.0.0/8, ::1, IPv4-mapped 127.x, or "localhost".
bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

// The Host header's name, lower-cased and without its port: "[::1]:6006" -> "[::1]".
std::string host_name_of(const std::string& host_header) {
  return ascii_lower(host_header.rfind("[", 0) == 0 ? host_header.substr(0, host_header.find(']') + 1)
                                                    : host_header.substr(0, host_header.find(':')));
}

bool stays_inside(const std::string& dir) {
  std::error_code ec;
  for (const std::string& name : run_file_names())
    if (fs::is_symlink(fs::symlink_status(fs::path(dir) / name, ec)) && file_inside(dir, name).empty())
      return false;
  return true;
}

}  // namespace

int serve(const BoardOptions& o) {
  for (const std::string& root : o.roots) {
    std::error_code ec;
    if (!fs::is_directory(root, ec))
      throw IoError("--runs " + root +
                    ": no such directory (the board shows the runs under the directories "
                    "--runs names; default runs/)");
  }
  // The page, read once: a request never names a file of the installation.
  std::map<std::string, std::pair<std::string, const char*>> assets;
  assets["/"] = {read_file(find_board_asset("index.html"), 1 << 20), "text/html; charset=utf-8"};
  assets["/static/board.js"] = {read_file(find_board_asset("board.js"), 1 << 20), "text/javascript"};
  assets["/static/board.css"] = {read_file(find_board_asset("board.css"), 1 << 20), "text/css"};
  const std::string chart_js = "/usr/share/javascript/chart.js/chart.min.js";
  std::error_code ec;
  assets["/static/chart.js"] = {
      fs::is_regular_file(chart_js, ec)
          ? read_file(chart_js, 8 << 20)
          : "window.TFM_NO_CHARTS = 'charts need Debian\\'s libjs-chart.js: apt-get install libjs-chart.js';",
      "text/javascript"};

  // SIGINT and SIGTERM are taken by one thread (sigtimedwait below), blocked in every other: the server's
  // threads, started after this, inherit the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  RunIndex index(o.roots);
  BoardModels models(static_cast<uint64_t>(o.model_memory_mb) << 20);
  BoundedHeadServer server;  // the read timeout, keep-alive and head bounds: board.h
  server.new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  server.set_payload_max_length(kMaxBodyBytes);
  // SO_REUSEADDR alone: httplib's default also sets SO_REUSEPORT, with which a second board bound the
  // same port without an error and the two answered its requests in turn.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  const bool loopback = is_loopback(o.host);
  // The address it listens on, as a browser sends it in Host: "127.0.0.2", "[::ffff:127.0.0.1]".
  const std::string shown_host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  const std::string bound_name = host_name_of(shown_host);
  // The methods each route answers, checked before a body is read: another is 405 with Allow.
  std::set<std::string> get_paths = {"/api/runs", "/api/metrics", "/api/config", "/api/diff", "/api/file"};
  for (const auto& asset : assets) get_paths.insert(asset.first);
  const auto allowed_methods = [get_paths](const std::string& path) -> const char* {
    if (get_paths.count(path)) return "GET, HEAD";
    for (const char* kind : {"sample", "attention", "fill_mask", "translate"})
      if (path == std::string("/api/model/") + kind) return "POST";
    return nullptr;
  };
  server.set_pre_routing_handler(
      [loopback, bound_name, allowed_methods](const httplib::Request& req, httplib::Response& res) {
        res.set_header("X-Content-Type-Options", "nosniff");
        res.set_header("Referrer-Policy", "no-referrer");
        // A reply here comes before the request's body is read: the connection ends with it.
        const auto refuse = [&res](int status, const std::string& why) {
          reply_error(res, status, why);
          close_connection_after(res);
          return httplib::Server::HandlerResponse::Handled;
        };
        // Bound to this machine only: a page elsewhere must not reach it through DNS rebinding.
        if (loopback) {
          // One Host: of two, a proxy and this check could each read another.
          if (req.get_header_value_count("Host") > 1) {
            return refuse(400, "Host: given more than once");
          }
          const std::string host = req.get_header_value("Host");
          const std::string name = host_name_of(host);
          if (!(name == "127.0.0.1" || name == "localhost" || name == "[::1]" || name == bound_name)) {
            return refuse(403, "Host \"" + host + "\": this board answers only to localhost");
          }
        }
        const char* allowed = allowed_methods(req.path);
        if (!allowed) {
          return refuse(404, "no such page");
        }
        const bool get = req.method == "GET" || req.method == "HEAD";
        if (std::string(allowed) == "POST" ? req.method != "POST" : !get) {
          res.set_header("Allow", allowed);
          return refuse(405, req.method + " " + req.path + ": this route answers " + allowed);
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ConfigError& e) {
      reply_error(res, 400, e.what());
    } catch (const std::exception& e) {
      reply_error(res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
      reply_error(res, 500, "internal error");
    }
  });
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413)
      return reply_error(
          res, 413,
          fmt::format("the request body is larger than the board takes, {} KiB", kMaxBodyBytes / 1024));
    reply_error(res, res.status, res.status == 404 ? "no such page" : "bad request");
  });

  for (const auto& [path, content] : assets) {
    const std::string body = content.first;
    const char* type = content.second;
    server.Get(path, [body, type](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'");
      res.set_content(body, type);
    });
  }
  server.Get("/api/runs",
             [&](const httplib::Request&, httplib::Response& res) { reply_json(res, index.listing()); });
  // The directory of the run the request names (its `run` parameter or field); "" once the reply says
  // what is wrong: 400 without one, 404 for a name the listing does not have.
  const auto named_dir = [&](const std::string& name, httplib::Response& res, bool results_too = false) {
    if (name.empty()) {
      reply_error(res, 400, "run: missing (a run's name as /api/runs lists it)");
      return std::string();
    }
    const std::string dir = index.dir_of(name, results_too);
    if (dir.empty())
      reply_error(res, 404,
                  "run \"" + name + "\": no such run under " + fmt::format("{}", fmt::join(o.roots, ", ")));
    return dir;
  };
  const auto run_dir = [&](const httplib::Request& req, httplib::Response& res, bool results_too = false) {
    return named_dir(req.get_param_value("run"), res, results_too);
  };
  server.Get("/api/metrics", [&](const httplib::Request& req, httplib::Response& res) {
    const std::string dir = run_dir(req, res);
    if (dir.empty()) return;
    const int64_t since = query_integer(req, "since", -1, -1, std::numeric_limits<int64_t>::max());
    const auto max_points =
        static_cast<size_t>(query_integer(req, "max_points", kDefaultMaxPoints, 2, kMaxMaxPoints));
    reply_json(res, metrics_reply(req.get_param_value("run"), *index.metrics(dir), since,
                                  req.get_param_value("since_id"), max_points));
  });
  server.Get("/api/config", [&](const httplib::Request& req, httplib::Response& res) {
    const std::string dir = run_dir(req, res);
    if (dir.empty()) return;
    const json config = json::parse(read_part_of(file_inside(dir, kRunConfigFile)), nullptr, false);
    if (!config.is_object())
      return reply_error(res, 409, dir + "/" + kRunConfigFile + ": missing or not JSON");
    reply_json(res, {{"run", req.get_param_value("run")}, {"config", config}});
  });
  server.Get("/api/diff", [&](const httplib::Request& req, httplib::Response& res) {
    // The keys whose values are not the same in every run named by a `run` parameter.
    const size_t n = req.get_param_value_count("run");
    if (n < 2 || n > kMaxDiffRuns)
      return reply_error(res, 400, fmt::format("run: give 2 to {} runs to compare, got {}", kMaxDiffRuns, n));
    std::vector<std::string> names;
    std::vector<json> configs;  // null: missing or not JSON, left out of the comparison
    json missing = json::array();
    for (size_t i = 0; i < n; ++i) {
      names.push_back(req.get_param_value("run", i));
      const std::string dir = index.dir_of(names.back());
      if (dir.empty()) return reply_error(res, 404, "run \"" + names.back() + "\": no such run");
      const json config = json::parse(read_part_of(file_inside(dir, kRunConfigFile)), nullptr, false);
      configs.push_back(config.is_object() ? config : json());
      missing.push_back(!config.is_object());
    }
    json rows = json::array();
    for (const ConfigDifferences& d : config_diff(configs))
      rows.push_back({{"key", d.key}, {"values", d.values}});
    reply_json(res, {{"runs", names}, {"missing_config", missing}, {"keys", rows}});
  });
  server.Get("/api/file", [&](const httplib::Request& req, httplib::Response& res) {
    const std::string dir = run_dir(req, res, true);
    if (dir.empty()) return;
    const std::string rel = req.get_param_value("path");
    const std::string path = file_inside(dir, rel);
    if (path.empty() && missing_inside(dir, rel))
      return reply_error(res, 404, "path \"" + rel + "\": no such file in the run");
    if (path.empty()) return reply_error(res, 403, "path \"" + rel + "\": not a file inside the run");
    const char* type = content_type_of(path);
    if (!type)
      return reply_error(
          res, 403,
          "path \"" + rel + "\": the board serves only json, jsonl, log, txt, csv, md, svg and png files");
    std::error_code size_ec;
    if (fs::file_size(path, size_ec) > kMaxServedFileBytes)
      return reply_error(res, 413, "path \"" + rel + "\": larger than 32 MiB");
    // A figure from a run directory is shown, never run: no scripts in an SVG.
    res.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; sandbox");
    res.set_content(read_file(path, kMaxServedFileBytes), type);
  });
  server.Post(R"(/api/model/(sample|attention|fill_mask|translate))",
              [&](const httplib::Request& req, httplib::Response& res) {
                const json body = json::parse(req.body, nullptr, false);
                if (!body.is_object()) return reply_error(res, 400, "the request body must be a JSON object");
                const auto run = body.find("run");
                if (run != body.end() && !run->is_string())
                  return reply_error(res, 400, "run: expected a string");
                const std::string dir = named_dir(run == body.end() ? "" : run->get<std::string>(), res);
                if (dir.empty()) return;
                const BoardReply r = models.evaluate(dir, req.matches[1], body);
                reply_json(res, r.body, r.status);
              });

  const int port =
      o.port == 0 ? server.bind_to_any_port(o.host) : (server.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0)
    throw IoError(
        fmt::format("--host {} --port {}: cannot listen there (the port is in use, or the address is "
                    "not this machine's)",
                    o.host, o.port));
  std::atomic<bool> done{false};
  std::thread stopper([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
        server.stop();
        return;
      }
    }
  });
  fmt::print("tfm board: http://{}:{}/ (runs under {}; Ctrl-C stops)\n", shown_host, port,
             fmt::join(o.roots, ", "));
  if (!loopback)
    fmt::print(stderr,
               "tfm: warning: --host {}: anyone who can reach this port can read these runs and use this "
               "machine's CPU for samples\n",
               o.host);
  std::fflush(stdout);
  std::fflush(stderr);
  server.listen_after_bind();
  done = true;
  stopper.join();
  fmt::print("tfm board: stopped\n");
  return 0;
}

}  // namespace tfm::board
