// One versioned, checksummed binary file per checkpoint.
//
//   offset 0   "TFMCKPT\0"                  magic
//          8   u32 format version            (kCheckpointVersion)
//         12   u32 number of sections        (at most kMaxSections)
//         16   u64 payload size in bytes     (must equal file size - 32)
//         24   u32 CRC-32 of the payload     (IEEE, as zlib)
//         28   u32 reserved (0)
//         32   payload: sections, each  u32 name length, name, u64 data length, data
//
// Sections: "config" (resolved config JSON), "vocab" (JSON: tokenizer kind and symbols), "state" (JSON:
// CheckpointState below), "model" (P float32 values), "optim.0", "optim.1", ... in that order (the
// optimizer's state buffers in Optimizer::state()'s order: AdamW's m and v, P float32 each; SGD's
// momentum; Muon's m and v of its AdamW part and its matrices' momentum),
// and for an encoder-decoder "vocab.target" (the target side's tokenizer; "vocab" is the source's).
// Each name appears once. All integers little-endian. Every size is checked against the bytes actually
// present before anything is allocated, and the checksum is verified before any section is parsed.
// The state's fields are checked (types and ranges) where it is read, so that no caller reads its JSON.
//
// Writes go to a temporary beside PATH (file_io.h's AtomicFile), are fsync'd and renamed over PATH,
// so a crash never leaves a half-written checkpoint where a good one was.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tfm/data/tokenizer.h"
#include "tfm/engine/random.h"

namespace tfm {

constexpr uint32_t kCheckpointVersion = 1;
constexpr uint32_t kMaxSections = 64;
// Largest checkpoint file load_checkpoint reads (64 GiB): a bound checked before allocating.
constexpr uint64_t kMaxCheckpointBytes = uint64_t{1} << 36;

// The steps since a run's last log line, summed (their training losses, gradient norms and auxiliary
// losses): kept in last.ckpt, so that a resumed run's first log line averages the steps an
// uninterrupted run's would.
struct UnloggedSteps {
  int64_t steps = 0;
  double loss = 0, grad_norm = 0, auxiliary = 0;
};

// One rank's random streams: the batch sampler's and the model's dropout.
struct RankStreams {
  Rng::State sampler{}, dropout{};
};

// The "state" section: where the run is, besides its weights. In the file a JSON object
//   {"step": 900, "best_val_loss": 1.49 or null, "elapsed_s": 61.2, "training_s": 58.4,
//    "rng": {"sampler": [5 words], "dropout": [5 words]  (rank 0's)
//            , "ranks": [{"sampler": [...], "dropout": [...]}, ...] (every rank's, when more than one)},
//    "optimizer": {"name": "adamw", "steps": 900}
//    , "ranks": 2 (more than one), "stopped": "target_loss" or "max_seconds", "ema_in_model": true,
//    "data_hash": "16 hex digits", "unlogged": {"steps": 3, "loss": 9.8, "grad_norm": 1.2, "auxiliary": 0}}
// (the fields after the optimizer only when they are not their defaults).
struct CheckpointState {
  int64_t step = 0;  // optimizer steps the run has taken, >= 0
  // The lowest val loss so far (best.ckpt's own); infinity when the run has not been evaluated yet.
  double best_val_loss = std::numeric_limits<double>::infinity();
  double elapsed_s = 0;  // seconds the run's processes took, their set-up (data, model) included, >= 0
  // Seconds of the training loop alone over the run's processes (steps, evaluations, checkpoints): the
  // clock of train.target_loss and train.max_seconds, >= 0. A checkpoint written before it was kept
  // apart reads elapsed_s here.
  double training_s = 0;
  std::vector<RankStreams> streams = {{}};  // one per rank the run was trained with, rank 0 first
  std::string optimizer;                    // the name the optim.* sections are for ("adamw", ...)
  int64_t optimizer_steps = 0;              // its own step count, >= 0
  std::string stopped;                      // "target_loss", "max_seconds", or "" (max_steps or running)
  bool ema_in_model = false;                // the weights hold the EMA, optim's EMA buffer the raw ones
  // Objective::data_hash of the data the run trained on, in hex; "" when unknown (no data, or a
  // checkpoint from before it was kept).
  std::string data_hash;
  UnloggedSteps unlogged;  // none in best.ckpt (its step is logged right after it is saved)

  bool evaluated() const { return std::isfinite(best_val_loss); }
  int64_t ranks() const { return static_cast<int64_t>(streams.size()); }
};

// The vocabularies (Vocabulary: tokenizer, target_tokenizer) and the rest of a run's state.
struct Checkpoint : Vocabulary {
  nlohmann::json config;                      // the resolved config the run was trained with
  CheckpointState state;                      // its fields checked where the file was read
  std::vector<float> model;                   // (P,) flat parameter values
  std::vector<std::vector<float>> optimizer;  // per state buffer (optim.h: (P,) each for AdamW and SGD)
};

// What save_checkpoint writes, by reference: the training run's buffers are streamed into the file
// section by section, without a copy of the parameters or the optimizer state.
struct CheckpointView {
  const nlohmann::json& config;
  const Tokenizer& tokenizer;
  const CheckpointState& state;
  const float* model;  // (P,)
  size_t parameters;   // P
  const std::vector<std::vector<float>>& optimizer;
  const Tokenizer* target_tokenizer = nullptr;  // seq2seq only
};

void save_checkpoint(const std::string& path, const CheckpointView& ckpt);
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);
// Throws IoError "PATH: ..." for a missing, truncated, corrupt or foreign file.
Checkpoint load_checkpoint(const std::string& path);
// The "state" section alone, read by seeking past the others: what a list of runs needs, without
// reading gigabytes of weights. The header and every section's bounds are checked against the file's
// size, but not the checksum (that needs every byte). IoError "PATH: ..." for a missing, truncated or
// foreign file, and for a state whose fields are missing or of the wrong type or range (naming the
// field and what it must be), as load_checkpoint.
CheckpointState load_checkpoint_state(const std::string& path);
// The header and the checksum of every payload byte, read in blocks (memory bounded whatever the file's
// size), without parsing the sections: that a file is whole before a choice rests on it (a resume's look
// at best.ckpt). IoError "PATH: ..." as load_checkpoint.
void verify_checkpoint(const std::string& path);
// The same reader over bytes in memory (load_checkpoint reads the file and calls it; fuzzers and
// tests call it directly); errors are IoError("<what>: ...").
Checkpoint parse_checkpoint(const uint8_t* data, size_t size, const std::string& what);

// IEEE CRC-32 (zlib's crc32: the PNG / Ethernet polynomial), continuing from `crc`.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace tfm
