// tfm-board, the server of `tfm board`: its parts shared by its files: the run directories it serves
// (server.cpp), the bounded request heads (http.cpp) and the model work it does on request (models.cpp),
// bounded in time, size, concurrency and memory.
#pragma once
#include <httplib.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "options.h"
#include "tfm/training/run_dir.h"

namespace tfm::board {

// Caps on what one request may ask the model for.
constexpr int64_t kBoardMaxPromptBytes = 2048;
constexpr int64_t kBoardMaxNewTokens = 512;
constexpr int64_t kBoardMaxTopK = 1000;
constexpr int64_t kBoardMaxBeam = 8;
// Requests for one run that may wait behind the one being evaluated; past it the answer is 429. All runs
// together share one evaluation at a time (the cores are shared), with at most kBoardMaxQueued waiting
// (503 past it).
constexpr int kBoardMaxQueuedPerRun = 2;
constexpr int kBoardMaxQueued = 8;

// Bounds on each request's head, the request line and its headers (http.cpp): bytes, lines (the
// request line and each header), and seconds from its first byte to its blank line. cpp-httplib bounds each
// line at 8 KiB itself. A read of the connection waits at most kBoardReadTimeoutSeconds; an idle
// keep-alive connection is closed after kBoardKeepAliveSeconds or kBoardKeepAliveRequests requests.
constexpr size_t kBoardMaxHeadBytes = 32 * 1024;
constexpr size_t kBoardMaxHeadLines = 64;
constexpr int kBoardHeadSeconds = 10;
constexpr int kBoardReadTimeoutSeconds = 5;
constexpr int kBoardKeepAliveSeconds = 2;
constexpr int kBoardKeepAliveRequests = 1000;

// cpp-httplib's server with the head bounds above on every request of every connection.
class BoundedHeadServer : public httplib::Server {
 private:
  bool process_and_close_socket(socket_t sock) override;
};

// Makes `res` the last reply of its connection ("Connection: close", and the connection closed after
// it): for a reply sent before the request's body was read (the pre-routing checks), so that a body
// the client sent is never read as the connection's next request.
void close_connection_after(httplib::Response& res);

// What a model request answers: an HTTP status and a JSON body ({"error": "..."} unless 200).
struct BoardReply {
  int status = 200;
  nlohmann::json body;
};

// Loaded runs kept for the next request, least recently used dropped first once their parameters
// (float32, 4 bytes each) pass the memory cap; a run whose checkpoint changed is loaded again.
class BoardModels {
 public:
  explicit BoardModels(uint64_t memory_cap_bytes) : cap_(memory_cap_bytes) {}
  // kind: "sample", "attention", "fill_mask", "translate"; request: the body's fields. Never throws.
  BoardReply evaluate(const std::string& dir, const std::string& kind, const nlohmann::json& request);
  uint64_t cached_bytes() const;

 private:
  struct Entry {
    std::string dir;
    std::string checkpoint_path;
    double checkpoint_mtime = 0;
    uint64_t bytes = 0;
    std::shared_ptr<LoadedRun> run;
  };
  std::shared_ptr<LoadedRun> acquire(const std::string& dir);  // under eval_mutex_
  BoardReply run_request(LoadedRun& run, const std::string& kind, const nlohmann::json& request);

  uint64_t cap_;
  mutable std::mutex cache_mutex_;  // guards cache_ and the queue counters
  std::list<Entry> cache_;          // most recently used first
  std::mutex eval_mutex_;           // one evaluation at a time
  int queued_ = 0;
  std::map<std::string, int> queued_per_run_;  // a node per run seen: a QueueTicket's reference stays valid
};

// Serves the board until SIGINT or SIGTERM (server.cpp); returns 0, or throws IoError or ConfigError
// for what it was asked (a missing --runs directory, a port it cannot listen on).
int serve(const BoardOptions& options);

}  // namespace tfm::board
