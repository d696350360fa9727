// `tfm board`'s "inside the model": a sample, attention maps and head similarity, fill-mask and
// translation for a run, computed by the same library code as tfm sample / attention / fill-mask /
// translate, one evaluation at a time, with capped sizes and a memory-capped cache of loaded runs.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <new>

#include "board.h"
#include "tfm/analysis/attention_maps.h"
#include "tfm/engine/error.h"
#include "tfm/models/sampling.h"
#include "tfm/objectives/inference.h"

namespace tfm::board {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The one place the board loads a run (the checkpoint load_run picks: best when there is one, else last),
// and the file that call reads, for the cache to notice a newer one.
LoadedRun load_board_run(const std::string& dir) {
  return load_run(dir);
}
std::string board_checkpoint_path(const std::string& dir) {
  std::error_code ec;
  const std::string best = dir + "/" + kBestCheckpointFile;
  return fs::exists(best, ec) ? best : dir + "/" + kLastCheckpointFile;
}
double mtime_of(const std::string& path) {
  std::error_code ec;
  const auto t = fs::last_write_time(path, ec);
  return ec ? 0.0 : std::chrono::duration<double>(t.time_since_epoch()).count();
}

// A request's field: a string of at most kBoardMaxPromptBytes, or an integer / number in [lo, hi];
// ConfigError naming the field and its bounds otherwise.
std::string text_field(const json& request, const char* key, bool required) {
  const auto it = request.find(key);
  if (it == request.end() || it->is_null()) {
    if (required) throw ConfigError(std::string(key) + ": required");
    return "";
  }
  if (!it->is_string()) throw ConfigError(std::string(key) + ": expected a string");
  const std::string s = it->get<std::string>();
  if (static_cast<int64_t>(s.size()) > kBoardMaxPromptBytes)
    throw ConfigError(std::string(key) + ": " + std::to_string(s.size()) + " bytes, at most " +
                      std::to_string(kBoardMaxPromptBytes));
  return s;
}
double number_field(const json& request, const char* key, double fallback, double lo, double hi) {
  const auto it = request.find(key);
  if (it == request.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() >= lo && it->get<double>() <= hi))
    throw ConfigError(std::string(key) + ": expected a number in [" + json(lo).dump() + ", " +
                      json(hi).dump() + "], got " + it->dump());
  return it->get<double>();
}
int64_t integer_field(const json& request, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const auto it = request.find(key);
  if (it == request.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi)
    throw ConfigError(std::string(key) + ": expected an integer " +
                      (hi == std::numeric_limits<int64_t>::max()
                           ? ">= " + std::to_string(lo)
                           : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]") +
                      ", got " + it->dump());
  return it->get<int64_t>();
}

// Counts a waiting request in and out of the queue counters.
class QueueTicket {
 public:
  QueueTicket(int& total, int& per_run) : total_(total), per_run_(per_run) { ++total_, ++per_run_; }
  ~QueueTicket() { --total_, --per_run_; }
  QueueTicket(const QueueTicket&) = delete;
  QueueTicket& operator=(const QueueTicket&) = delete;

 private:
  int &total_, &per_run_;
};

}  // namespace

uint64_t BoardModels::cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  uint64_t total = 0;
  for (const Entry& e : cache_) total += e.bytes;
  return total;
}

std::shared_ptr<LoadedRun> BoardModels::acquire(const std::string& dir) {
  const std::string ckpt = board_checkpoint_path(dir);
  const double mtime = mtime_of(ckpt);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->dir == dir) {
        if (it->checkpoint_path == ckpt && it->checkpoint_mtime == mtime) {
          cache_.splice(cache_.begin(), cache_, it);
          return cache_.front().run;
        }
        cache_.erase(it);  // a newer checkpoint: load it again
        break;
      }
  }
  auto run = std::make_shared<LoadedRun>(load_board_run(dir));
  // The weights now live in the model: the checkpoint's copies (and its optimizer state) go.
  std::vector<float>().swap(run->checkpoint.model);
  std::vector<std::vector<float>>().swap(run->checkpoint.optimizer);
  const uint64_t bytes = 4 * static_cast<uint64_t>(run->objective->model().parameter_count());
  if (bytes > cap_)
    throw ConfigError(dir + ": the model's " + std::to_string(bytes >> 20) +
                      " MiB of parameters exceed --model-memory-mb (" + std::to_string(cap_ >> 20) + " MiB)");
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.push_front(Entry{dir, ckpt, mtime, bytes, run});
  uint64_t total = 0;
  for (const Entry& e : cache_) total += e.bytes;
  while (total > cap_ && cache_.size() > 1) total -= cache_.back().bytes, cache_.pop_back();
  return run;
}

BoardReply BoardModels::evaluate(const std::string& dir, const std::string& kind, const json& request) {
  std::unique_lock<std::mutex> counters(cache_mutex_);
  int& queued_for_run = queued_per_run_[dir];  // a map's node never moves: the ticket's reference holds
  if (queued_for_run > kBoardMaxQueuedPerRun)
    return {429,
            {{"error", "busy: this run is already evaluating " + std::to_string(queued_for_run) +
                           " requests; try again shortly"}}};
  if (queued_ >= kBoardMaxQueued)
    return {503, {{"error", "busy: " + std::to_string(queued_) + " model requests are waiting; try again"}}};
  QueueTicket ticket(queued_, queued_for_run);
  counters.unlock();
  BoardReply reply;
  {
    std::lock_guard<std::mutex> one_at_a_time(eval_mutex_);
    try {
      std::shared_ptr<LoadedRun> run;
      try {
        run = acquire(dir);
      } catch (const IoError& e) {
        reply = {409, {{"error", e.what()}}};  // the run's files: missing, being written or corrupt
      }
      // A text the tokenizer cannot encode is the request's fault (IoError names it): 400 as below.
      if (run) reply = run_request(*run, kind, request);
    } catch (const ConfigError& e) {
      reply = {400, {{"error", e.what()}}};
    } catch (const IoError& e) {
      reply = {400, {{"error", e.what()}}};
    } catch (const std::bad_alloc&) {
      reply = {503, {{"error", "out of memory for this request; ask for less"}}};
    } catch (const std::exception& e) {
      reply = {500, {{"error", std::string("internal error: ") + e.what()}}};
    }
  }
  counters.lock();  // the ticket's decrement happens under the lock too
  return reply;
}

BoardReply BoardModels::run_request(LoadedRun& run, const std::string& kind, const json& request) {
  const ObjectiveCapabilities can = run.objective->capabilities();
  const std::string objective = run.objective->name();
  const auto needs = [&](Inference inference, const char* what) {
    if (can.inference != inference)
      throw ConfigError(std::string(what) + ": not for a " + objective +
                        " run (it does: " + can.inference_command + ")");
  };
  if (kind == "sample") {
    needs(Inference::Sample, "sample");
    SampleOptions o;
    o.prompt = text_field(request, "prompt", false);
    o.max_new_tokens = integer_field(request, "max_tokens", 200, 0, kBoardMaxNewTokens);
    const SampleRange temperature = sample_option_range(SampleOption::Temperature);  // closed: [0, 100]
    o.temperature = number_field(request, "temperature", 0.8, temperature.lo, temperature.hi);
    // Any k >= 0: one at or above the vocabulary keeps every token (sampling.h's table).
    const SampleRange top_k = sample_option_range(SampleOption::TopK);
    o.top_k = integer_field(request, "top_k", 0, static_cast<int64_t>(top_k.lo),
                            std::numeric_limits<int64_t>::max());
    o.seed = static_cast<uint64_t>(integer_field(request, "seed", 1337, 0, int64_t{1} << 53));
    encode_prompt(run.checkpoint.tokenizer, o.prompt, "prompt");  // a bad prompt is refused by name
    return {200, {{"prompt", o.prompt}, {"text", generate(*run.model, run.checkpoint.tokenizer, o)}}};
  }
  if (kind == "attention") {
    const std::string text = text_field(request, "text", true);
    if (!run.model) {  // an encoder-decoder: its three kinds of attention on the pair
      const PairAttention a =
          pair_attention(*run.objective, text, text_field(request, "target", false), "text", "target");
      return {200, pair_attention_report_json(a)};
    }
    const AttentionText t =
        attention_text(run.checkpoint.tokenizer, text, *run.model, "text", mask_token_id(*run.objective));
    json report = attention_report_json(analyze_attention(*run.model, t.ids), t.tokens);
    report["kind"] = objective;
    return {200, report};
  }
  if (kind == "fill_mask") {
    needs(Inference::FillMask, "fill_mask");
    const std::string text = text_field(request, "text", true);
    // As tfm fill-mask: a k past the vocabulary lists every candidate (fill_mask takes at most them).
    const int64_t top_k = integer_field(request, "top_k", 5, 1, kBoardMaxTopK);
    const FillMaskResult r = fill_mask(*run.objective, text, top_k, "text");
    json masks = json::array();
    for (const MaskCandidates& m : r.masks) {
      json c = json::array();
      for (const auto& [token, p] : m.candidates) c.push_back({{"token", token}, {"probability", p}});
      masks.push_back({{"position", m.position}, {"candidates", c}});
    }
    return {200, {{"text", text}, {"masks", masks}}};
  }
  if (kind == "translate") {
    needs(Inference::Translate, "translate");
    const std::string text = text_field(request, "text", true);
    TranslateOptions o;
    o.beam = integer_field(request, "beam", 1, 1, kBoardMaxBeam);
    std::vector<std::string> warnings;  // a text cut or read with <unk>: said, as tfm translate does
    const std::vector<std::string> out = translate_texts(*run.objective, {text}, o, "text", &warnings);
    return {200, {{"text", text}, {"translation", out.empty() ? "" : out.front()}, {"warnings", warnings}}};
  }
  throw ConfigError("unknown model request \"" + kind + "\"");
}

}  // namespace tfm::board
