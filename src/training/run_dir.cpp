#include "tfm/training/run_dir.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tfm/config/config.h"
#include "tfm/engine/enum_names.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/platform.h"
#include "tfm/engine/safetensors.h"
#include "tfm/models/language_model.h"
#include "tfm/training/preflight.h"
#include "tfm/training/run_lock.h"

namespace tfm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Anything under the name counts (a dangling symlink or a FIFO too): a directory is taken for a run
// on the side of caution.
bool present(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

bool is_loss_figure_name(const std::string& name) {
  return name == kLossFigureFile || name == kLogLossFigureFile;
}

bool is_run_file_name(const std::string& name, bool with_loss_figures) {
  const std::vector<std::string>& names = run_file_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  return with_loss_figures && is_loss_figure_name(name);
}

// The run file `p` would be (its name in a directory that holds a run), or "" when it is none.
std::string run_file_at(const fs::path& p, bool with_loss_figures) {
  const std::string name = p.filename().string();
  return is_run_file_name(name, with_loss_figures) && holds_a_run(p.parent_path().string()) ? name : "";
}

// `path` with its directory resolved (symlinks, `.` and `..`) and its own name kept, so a symlink
// is judged by its own name; and where the whole path leads (a symlink followed), when that differs.
std::vector<fs::path> spellings_of(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return {};
  if (!p.has_filename()) p = p.parent_path();  // "DIR/": the directory itself
  std::vector<fs::path> out;
  const std::string name = p.filename().string();
  if (name != "." && name != "..") out.push_back(fs::weakly_canonical(p.parent_path(), ec) / name);
  const fs::path leads_to = fs::weakly_canonical(p, ec);
  if (!ec && (out.empty() || leads_to != out.front())) out.push_back(leads_to);
  return out;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa = {};
  struct stat sb = {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {kRunConfigFile, kLastCheckpointFile, kBestCheckpointFile,
                                                 kRunLogFile,    kMetricsFile,        RunLock::kFileName};
  return names;
}

std::vector<std::string> run_files_in(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const char* name : {kLastCheckpointFile, kBestCheckpointFile, kRunLogFile, kMetricsFile})
    if (present(fs::path(dir) / name)) found.push_back(name);
  return found;
}

void require_run_directory(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) throw IoError(dir + ": no such run directory");
  if (!fs::is_directory(st))
    throw IoError(dir +
                  ": not a run directory (it is a file; give the directory `tfm train` wrote, which holds " +
                  kLastCheckpointFile + " or " + kBestCheckpointFile + ")");
}

std::string resume_checkpoint_path(const std::string& dir) {
  for (const char* name : {kLastCheckpointFile, kBestCheckpointFile})
    if (present(fs::path(dir) / name)) return dir + "/" + name;
  return "";
}

std::vector<CommandInput> run_inputs(const std::string& checkpoint_path, const Config& config) {
  std::vector<CommandInput> inputs = {{"the run's checkpoint", checkpoint_path}};
  for (const char* key : {"data.path", "data.tokenizer_path"}) {
    // A list, given as one or as its JSON text in a string (how runs recorded it before).
    const nlohmann::json v = comparable_value(*find_key(key), config.at(key));
    if (v.is_string()) inputs.push_back({key, v.get<std::string>()});
    if (v.is_array())  // data.path's list: each of its files
      for (size_t i = 0; i < v.size(); ++i)
        if (v[i].is_string())
          inputs.push_back({std::string(key) + "[" + std::to_string(i) + "]", v[i].get<std::string>()});
  }
  return inputs;
}

void check_output_path(const std::string& flag, const std::string& path,
                       const std::vector<CommandInput>& inputs, bool may_draw_loss_figures) {
  for (const fs::path& p : spellings_of(path)) {
    const std::string name = run_file_at(p, !may_draw_loss_figures);
    if (name.empty()) continue;
    const std::string via =
        p.filename() == fs::path(path).filename() ? "" : " (where it leads: " + p.string() + ")";
    const bool figure = is_loss_figure_name(name);
    throw ConfigError(
        flag + ": " + path + via + " is the " + name + " of the run in " + p.parent_path().string() +
        "; only `tfm train`" +
        (figure ? " and `tfm plot loss` draw a run's loss figures" : " writes a run's own files") +
        ": write the output elsewhere");
  }
  for (const CommandInput& in : inputs)
    if (!in.path.empty() && same_file(path, in.path))
      throw ConfigError(
          flag + ": " + path + " is the same file as " + in.what + " " + in.path +
          ", which this command reads: writing it would destroy its input; choose another path");
}

void make_output_dir(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw ConfigError(dir + ": is a file, not a directory (" + flag + " names the directory to write into)");
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw IoError(dir + ": cannot create the output directory (" + flag + ")");
}

// ---- loading a run ----

Config checkpoint_config(const Checkpoint& ckpt, const std::string& path) {
  try {
    return resolve_config(ckpt.config);
  } catch (const ConfigError& e) {
    throw IoError(path + ": the checkpoint's config is invalid: " + e.what());
  }
}

std::vector<std::pair<std::string, json>> check_run_config_file(const std::string& dir, const Config& trained,
                                                                const std::string& checkpoint_path) {
  const std::string path = dir + "/" + kRunConfigFile;
  if (!present(path)) return {};    // written again at the resume's first step
  require_regular_or_absent(path);  // a link or device there is refused as such, never read
  const std::string resumable = resumable_keys_text();
  const std::string advice =
      "; restore the file (or remove it: the resume writes it again). --resume takes the config from the "
      "checkpoint; a change is passed as `tfm train --resume " +
      dir + " --set KEY=VALUE`, and only " + resumable + " may change";
  Config file;
  try {
    file = resolve_config(read_json_file(path));
  } catch (const Error& e) {
    throw ConfigError(path + ": cannot be compared with the config of the run's checkpoint " +
                      checkpoint_path + ": " + e.what() + advice);
  }
  const ObjectiveKind objective = trained.train().objective;
  std::vector<std::pair<std::string, json>> differing;
  for (const std::string& key : differing_keys(trained, file)) {
    const KeySpec* k = find_key(key);
    // The directory may have moved; a key the objective does not read is derived afresh on resume.
    if (key == "output.dir" || !k->read_by(objective)) continue;
    if (k->resumable) {
      differing.emplace_back(key, file.at(key));
      continue;
    }
    throw ConfigError(path + ": " + key + " is " + file.at(key).dump() + " there, but the run's checkpoint " +
                      checkpoint_path + " was trained with " + trained.at(key).dump() +
                      ": config.json was edited, and the edit would be ignored and overwritten" + advice +
                      " (not " + key + ": a new run trains with another value)");
  }
  return differing;
}

namespace {

// Weights are read once, at load: a NaN or infinity there (a run saved as it diverged, a file damaged or
// written elsewhere) would turn every output into NaN or garbage, silently. IoError naming the file, the
// tensor and the first such value's index in it (values: the tensor's, of `shape`).
void require_finite_weights(const std::string& source, const std::string& tensor, const Shape& shape,
                            const float* values) {
  const int64_t n = shape_numel(shape);
  const int64_t flat = first_nonfinite(values, n);
  if (flat == n) return;
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(), rest = static_cast<size_t>(flat); d-- > 0;) {
    index[d] = static_cast<int64_t>(rest % static_cast<size_t>(shape[d]));
    rest /= static_cast<size_t>(shape[d]);
  }
  const char* value = nonfinite_name(values[flat]);
  throw IoError(fmt::format(
      "{}: tensor {} {} holds {} at index {} (value {} of {}): weights that are not finite give no usable "
      "model (saved from a run that diverged, or the file is damaged)",
      source, tensor, shape_str(shape), value, shape_str(index), flat, n));
}

}  // namespace

void restore_model(Model& model, const Checkpoint& ckpt, const std::string& source) {
  const int64_t P = model.parameter_count();
  if (static_cast<int64_t>(ckpt.model.size()) != P)
    throw IoError(source + ": the checkpoint holds " + std::to_string(ckpt.model.size()) +
                  " parameter values, the model of its config needs " + std::to_string(P) + " (" +
                  std::to_string(model.parameters().size()) +
                  " tensors; was the config or the vocabulary changed?)");
  for (const auto& p : model.parameters())
    require_finite_weights(source, p.name, p.value.shape(), ckpt.model.data() + p.offset);
  std::copy(ckpt.model.begin(), ckpt.model.end(), model.flat_values().data());
}

namespace {

// A token as a message shows it: quoted, escaped, invalid UTF-8 (a byte or BPE piece) replaced.
std::string token_display(const Tokenizer& t, int32_t id) {
  const std::string text = t.is_special(id) ? t.specials()[static_cast<size_t>(id)] : t.decode(id);
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Where the file's tokenizer first differs from the run's, for a message; "" when they are the same.
std::string tokenizer_difference(const Tokenizer& file, const Tokenizer& run) {
  if (file.to_json() == run.to_json()) return "";
  if (file.kind() != run.kind())
    return "a " + file.kind_name() + " tokenizer in the file, " + run.kind_name() + " in the run";
  if (file.size() != run.size())
    return fmt::format("{} tokens in the file, {} in the run", file.size(), run.size());
  for (int32_t id = 0; id < static_cast<int32_t>(run.size()); ++id)
    if (file.is_special(id) != run.is_special(id) || token_display(file, id) != token_display(run, id))
      return fmt::format("{} tokens each, but id {} is {} in the file and {} in the run", run.size(), id,
                         token_display(file, id), token_display(run, id));
  return fmt::format("the same {} tokens, other BPE merge rules", run.size());
}

// The file's tokenizer under metadata `key` against the run's: ConfigError naming both when they
// differ; false when the file carries none.
bool compare_tokenizer(const SafetensorsFile& f, const std::string& key, const Tokenizer& run,
                       const std::string& run_source) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) return false;
  Tokenizer stored;
  try {
    const std::string& text = it->second;
    stored = Tokenizer::from_json(parse_json_strict(text.data(), text.size(), f.source + ": " + key));
  } catch (const json::exception& e) {
    throw IoError(f.source + ": metadata \"" + key + "\" is not a tokenizer (" + e.what() + ")");
  }
  const std::string diff = tokenizer_difference(stored, run);
  if (!diff.empty())
    throw ConfigError(f.source + ": its " + key + " is not the run's (" + run_source + "): " + diff +
                      ". Its weights would read other tokens than they were trained on; start from a file "
                      "exported from a run with the same data and tokenizer, or without --init-from");
  return true;
}

// The run's config against the config the file's metadata "config" was exported with: its
// train.objective, and the model.* keys that objective reads (weights-agnostic keys aside). ConfigError
// naming what differs, with the --set of every key that differs, so that the `tfm train` it advises
// reads the file; false when the file carries no config. A key the file's config lacks (an older tfm's)
// is not compared.
bool compare_model_keys(const SafetensorsFile& f, const Config& run) {
  const auto it = f.metadata.find("config");
  if (it == f.metadata.end()) return false;
  const std::string& text = it->second;
  const json stored = parse_json_strict(text.data(), text.size(), f.source + ": config");
  const auto stored_at = [&stored](const std::string& path) -> const json* {
    std::string pointer = "/" + path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    const json::json_pointer at(pointer);
    return stored.contains(at) ? &stored.at(at) : nullptr;
  };
  // The objective the file's weights were trained for, when the file names one (the weights of one start
  // only a run of the same: a masked LM's embedding has [MASK]'s row, its attention saw both sides).
  ObjectiveKind objective = run.train().objective;
  const json* their_objective = stored_at("train.objective");
  const bool other_objective = their_objective && *their_objective != run.at("train.objective");
  if (other_objective) {
    const auto kind = their_objective->is_string()
                          ? enum_from<ObjectiveKind>(their_objective->get<std::string>())
                          : std::nullopt;
    if (!kind) throw IoError(f.source + ": metadata \"config\" names no train.objective tfm knows");
    objective = *kind;
  }
  // What differs: "model.a = 1 and model.b = 2", the run's "3 and 4", " --set model.a=1 --set model.b=2".
  std::string keys, ours, sets;
  int differing = 0;
  for (const KeySpec& key : config_keys()) {
    if (key.path.rfind("model.", 0) != 0 || key.weights_agnostic || !key.read_by(objective)) continue;
    const json* theirs = stored_at(key.path);
    if (!theirs || *theirs == run.at(key.path)) continue;
    const std::string joint = differing++ == 0 ? "" : " and ";
    keys += joint + key.path + " = " + theirs->dump();
    ours += joint + run.at(key.path).dump();
    sets += " --set " + key.path + "=" + theirs->dump();
  }
  if (!other_objective && differing == 0) return true;
  if (!other_objective)
    throw ConfigError(f.source + ": exported from a run with " + keys + ", this run has " + ours +
                      ": weights trained under one value are wrong under the other. A run with " +
                      (differing == 1 ? "that value" : "those values") +
                      " reads them (tfm train --init-from " + f.source + sets +
                      "); or do without --init-from");
  const std::string name = their_objective->get<std::string>();
  const std::string mismatch = f.source + ": exported from a train.objective \"" + name +
                               "\" run, this run's is \"" + name_of(run.train().objective) +
                               "\": weights trained for one objective do not start another. ";
  // seq2seq reads sentence pairs, the others text: no --set alone turns one run into the other.
  if (objective_capabilities(objective).data != objective_capabilities(run.train().objective).data)
    throw ConfigError(mismatch + "A " + name +
                      " run on data of the same vocabulary reads them; or do without --init-from");
  throw ConfigError(mismatch + "A " + name + " run reads them (tfm train --init-from " + f.source +
                    " --set train.objective=" + name + sets + "); or do without --init-from");
}

}  // namespace

std::vector<std::string> load_safetensors_into(Model& model, const std::string& path,
                                               const Vocabulary* vocabulary,
                                               const std::string& vocabulary_source, const Config* config) {
  const SafetensorsFile f = load_safetensors(path);
  std::vector<std::string> notes;
  std::string absent;
  if (vocabulary) {
    if (!compare_tokenizer(f, "tokenizer", vocabulary->tokenizer, vocabulary_source))
      absent = "\"tokenizer\"";
    if (vocabulary->target_tokenizer &&
        !compare_tokenizer(f, "target_tokenizer", *vocabulary->target_tokenizer, vocabulary_source))
      absent += (absent.empty() ? "" : " or ") + std::string("\"target_tokenizer\"");
  }
  if (config && !compare_model_keys(f, *config))
    absent += (absent.empty() ? "" : " or ") + std::string("\"config\"");
  if (!absent.empty())
    notes.push_back(path + ": no " + absent +
                    " in its metadata (not a tfm export?), so its vocabulary and model settings cannot be "
                    "compared with the run's; the weights are loaded as they are");
  for (const auto& [name, t] : f.tensors)
    if (!model.find_parameter(name))
      throw IoError(path + ": tensor " + name + " is not a parameter of the model");
  for (const auto& p : model.parameters()) {
    if (!f.contains(p.name)) throw IoError(path + ": no tensor " + p.name + " (the model needs it)");
    const Tensor& t = f.at(p.name);
    const std::vector<float> v = t.to_vector();
    require_finite_weights(path, p.name, t.shape(), v.data());
    float* to = model.flat_values().data() + p.offset;
    // A learned position table (L, C) of another model.max_seq_len: row t is position t in both, so the
    // positions both have take the file's rows and the model keeps its own past the file's.
    const bool other_length = is_position_table(p.name) && t.dim() == 2 && p.value.dim() == 2 &&
                              t.size(1) == p.value.size(1) && t.size(0) != p.value.size(0);
    if (t.shape() != p.value.shape() && !other_length)
      throw IoError(path + ": tensor " + p.name + " has shape " + shape_str(t.shape()) +
                    ", the model needs " + shape_str(p.value.shape()));
    const int64_t file_rows = t.size(0), model_rows = p.value.size(0);
    const int64_t n = std::min(t.numel(), p.value.numel());  // whole rows: the widths are equal
    std::copy(v.begin(), v.begin() + n, to);
    if (other_length && file_rows < model_rows)
      notes.push_back(fmt::format(
          "{}: its position table {} holds {} positions (the model.max_seq_len it was trained with), this "
          "model {}: positions {} to {} keep this model's own values (a new run's: their initialisation), "
          "to be learned from here",
          path, p.name, file_rows, model_rows, file_rows, model_rows - 1));
  }
  return notes;
}

ChosenCheckpoint choose_checkpoint(const std::string& dir, const std::string& which) {
  require_run_directory(dir);
  if (!which.empty() && which != "last" && which != "best")
    throw ConfigError("--checkpoint: expected \"last\" or \"best\", got \"" + which + "\"");
  const std::string best = dir + "/" + kBestCheckpointFile, last = dir + "/" + kLastCheckpointFile;
  if (which.empty()) {
    if (fs::exists(best)) return {"best", best};
    if (fs::exists(last)) return {"last", last};
    throw IoError(dir + ": no checkpoint here, neither " + kBestCheckpointFile + " nor " +
                  kLastCheckpointFile + " (has the run written one yet?)");
  }
  const ChosenCheckpoint asked{which, which == "best" ? best : last};
  if (!fs::exists(asked.path)) {
    const std::string other = which == "best" ? last : best;
    throw IoError(asked.path + ": no such checkpoint (--checkpoint " + which + ")" +
                  (fs::exists(other) ? "; the run has " + other : "; has the run written one yet?"));
  }
  return asked;
}

std::string describe_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  const CheckpointState& state = ckpt.state;
  std::string val = "not evaluated yet";
  if (state.evaluated()) {
    const bool is_best = fs::path(path).filename().string() == kBestCheckpointFile;
    val = fmt::format("{} {:.4g}", is_best ? "val loss" : "best val loss so far", state.best_val_loss);
  }
  return fmt::format("{} (step {}, {})", path, state.step, val);
}

LoadedRun load_run(const std::string& dir_asked, const std::string& which_asked, bool with_data) {
  // "runs/x/" is runs/x: its name (an export's model name) and its files' paths without a "//".
  std::string dir = dir_asked;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const ChosenCheckpoint chosen = choose_checkpoint(dir, which_asked);
  const std::string& path = chosen.path;
  LoadedRun run;
  run.dir = dir;
  run.which = chosen.which;
  run.checkpoint_path = path;
  try {
    run.checkpoint = load_checkpoint(path);
  } catch (const IoError& e) {
    // A damaged file may have a whole sibling (best.ckpt is written at evaluations, last.ckpt at
    // checkpoints): say how to read that one instead.
    const std::string other_which = chosen.which == "best" ? "last" : "best";
    const std::string other =
        dir + "/" + (chosen.which == "best" ? kLastCheckpointFile : kBestCheckpointFile);
    if (!fs::exists(other)) throw;
    throw IoError(std::string(e.what()) + " (the run also has " + other + ": --checkpoint " + other_which +
                  " reads it)");
  }
  run.config = checkpoint_config(run.checkpoint, path);
  run.objective = make_objective(run.config, &run.checkpoint,
                                 {with_data, 0, memory_check(run.config, {"loading " + path, false, 1})});
  restore_model(run.objective->model(), run.checkpoint, path);
  run.model = dynamic_cast<LanguageModel*>(&run.objective->model());
  platform::configure_threads(static_cast<int>(run.config.train().threads));
  return run;
}

}  // namespace tfm
