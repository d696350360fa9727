// tfm attention | export | tokenizer: looking inside a run and moving its weights out (docs/insight.md).
#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "tfm/analysis/attention_maps.h"
#include "tfm/analysis/figures.h"
#include "tfm/data/bpe.h"
#include "tfm/data/corpus.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/engine/gguf.h"
#include "tfm/engine/platform.h"
#include "tfm/engine/safetensors.h"
#include "tfm/engine/strings.h"
#include "tfm/models/gguf_export.h"
#include "tfm/models/gguf_reference.h"
#include "tfm/objectives/inference.h"
#include "tfm/training/run_dir.h"

namespace tfm::cli {
namespace {

namespace fs = std::filesystem;

// A float32 C-order .npy file (format version 1.0): magic, version, header length, a Python dict
// literal padded with spaces to a multiple of 64 bytes (newline last), then the raw values.
void write_npy(const std::string& path, const Tensor& t) {
  std::string shape;  // "(2, 3, 4)", but "(5,)" for rank 1
  for (int64_t d : t.shape()) shape += (shape.empty() ? "(" : ", ") + std::to_string(d);
  shape += t.shape().size() == 1 ? ",)" : ")";
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t prefix = 10;  // magic (6) + version (2) + header length (2)
  dict.append(63 - (prefix + dict.size()) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const auto n = static_cast<uint16_t>(dict.size());
  out += static_cast<char>(n & 0xFF);
  out += static_cast<char>(n >> 8);
  out += dict;
  const std::vector<float> v = t.to_vector();
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  write_file_atomically(path, out);
}

// ---- tfm attention ----

struct AttentionOptions {
  std::string run, text, target, out, which, mask_heads;
  bool no_plot = false;
};

std::string output_dir(const AttentionOptions& o, const LoadedRun& run) {
  const std::string out = o.out.empty() ? run.dir + "/attention" : o.out;
  check_output_path("--out", out, run_inputs(run.checkpoint_path, run.config));
  make_output_dir(out);
  return out;
}

// An encoder-decoder: encoder self-attention, decoder self-attention and cross-attention per layer.
int run_pair_attention(const AttentionOptions& o, LoadedRun& run) {
  const PairAttention a = pair_attention(*run.objective, o.text, o.target);
  for (const std::string& line : a.notes) std::fprintf(stderr, "tfm: note: %s\n", line.c_str());
  const std::string out = output_dir(o, run);
  const std::string report = out + "/attention.json";
  const nlohmann::json j = pair_attention_report_json(a);
  write_file_atomically(report, j.dump() + "\n");
  if (!o.no_plot)
    for (const auto& [file, svg] : attention_figures(j)) write_figure(out + "/" + file, svg);
  // The pair as the model read it: its tokens, each side cut to what the model reads.
  std::string source, target;
  for (size_t s = 0; s + 1 < a.source_tokens.size(); ++s) source += (s ? " " : "") + a.source_tokens[s];
  for (size_t t = 0; t + 1 < a.target_tokens.size(); ++t) target += (t ? " " : "") + a.target_tokens[t];
  fmt::print("pair: {} => {}{}\n", source.c_str(), target.c_str(),
             o.target.empty() ? " (the run's greedy translation; --target sets another)" : "");
  for (const char* kind : {"encoder", "decoder_self", "cross"}) {
    const std::vector<Tensor>& layers = std::string(kind) == "encoder"        ? a.encoder
                                        : std::string(kind) == "decoder_self" ? a.decoder_self
                                                                              : a.cross;
    for (size_t l = 0; l < layers.size(); ++l) {
      write_npy(out + "/attention_" + kind + "_layer" + std::to_string(l) + ".npy", layers[l]);
      fmt::print("{} layer {}: mean head pattern similarity {:.2f}\n", kind, l,
                 j[kind][l]["mean_pattern_similarity"].get<double>());
    }
  }
  fmt::print(
      "wrote {} and attention_{{encoder,decoder_self,cross}}_layerL.npy ({} source, {} target tokens; "
      "(H, rows, cols) float32)\n",
      report.c_str(), a.source_tokens.size(), a.target_tokens.size());
  return kExitOk;
}

int run_attention(const AttentionOptions& o) {
  LoadedRun run = read_run(o.run, o.which);
  if (!run.model) {
    if (!o.mask_heads.empty())
      throw ConfigError(
          "--mask-heads: only for causal_lm and masked_lm runs (this run's train.objective is \"" +
          run.objective->name() + "\")");
    return run_pair_attention(o, run);
  }
  apply_head_mask(run, o.mask_heads);
  if (!o.target.empty())
    throw ConfigError("--target: only for seq2seq runs (this run's train.objective is \"" +
                      run.objective->name() + "\")");
  const AttentionText t =
      attention_text(run.checkpoint.tokenizer, o.text, *run.model, "--text", mask_token_id(*run.objective));

  const std::vector<LayerAttention> layers = analyze_attention(*run.model, t.ids);
  const std::string out = output_dir(o, run);
  const std::string report = out + "/attention.json";
  nlohmann::json j = attention_report_json(layers, t.tokens);
  if (!o.mask_heads.empty()) j["mask_heads"] = o.mask_heads;  // the maps are of the model without them
  write_file_atomically(report, j.dump() + "\n");
  for (size_t l = 0; l < layers.size(); ++l) {
    write_npy(out + "/attention_layer" + std::to_string(l) + ".npy", layers[l].probabilities);
    // A head with no output (masked by --mask-heads, or never picked by a top-k gate on this text)
    // contributes nothing: its similarities (its diagonal too) are not defined.
    const Tensor& rho_ij = layers[l].output_similarity;  // (H, H)
    const int64_t H = rho_ij.size(0);
    int64_t silent = 0;
    for (int64_t h = 0; h < H; ++h) silent += !std::isfinite(rho_ij.data()[h * H + h]);
    const bool gated = run.model->config().head_gating == HeadGating::TopK;
    const std::string why = !o.mask_heads.empty() && gated ? "masked or never picked by the top-k gate"
                            : gated                        ? "never picked by the top-k gate on this text"
                                                           : "masked";
    const double rho = layers[l].mean_output_similarity;
    fmt::print(
        "layer {}: mean head similarity rho = {} (output{}), {:.2f} (pattern)\n", l,
        std::isfinite(rho) ? fmt::format("{:.2f}", rho) : std::string("n/a"),
        silent ? fmt::format(", of the {} heads with output; {} {}", H - silent, silent, why) : std::string(),
        layers[l].mean_pattern_similarity);
  }
  fmt::print("wrote {} and attention_layer{{0..{}}}.npy ({} tokens; probabilities (H, T, T) float32)\n",
             report.c_str(), layers.size() - 1, t.ids.size());
  if (!o.no_plot)
    for (const auto& [file, svg] : attention_figures(j)) write_figure(out + "/" + file, svg);
  return kExitOk;
}

// ---- tfm export ----

struct ExportOptions {
  std::string run, out, which, format, dtype = "f32";
};

int export_safetensors(const ExportOptions& o, const LoadedRun& run) {
  if (o.out.empty()) throw ConfigError("--out: required for --format safetensors (the file to write)");
  check_output_path("--out", o.out, run_inputs(run.checkpoint_path, run.config));
  if (o.dtype != "f32")
    throw ConfigError("--dtype: safetensors exports are float32; \"" + o.dtype + "\" is for --format gguf");
  const Model& model = run.objective->model();
  NamedTensors tensors;
  for (const NamedParameter& p : model.parameters()) tensors.emplace_back(p.name, p.value);
  const Tokenizer& tok = run.checkpoint.tokenizer;
  std::map<std::string, std::string> metadata = {
      {"format", "tfm"},
      {"objective", run.objective->name()},
      {"config", exported_config(run.config).dump()},  // local paths cut to names
      {"tokenizer", tok.to_json().dump()},
      {"step", std::to_string(run.checkpoint.state.step)}};
  if (run.checkpoint.target_tokenizer)
    metadata["target_tokenizer"] = run.checkpoint.target_tokenizer->to_json().dump();
  // The document separator, for a reader that does not parse the tokenizer: the corpus's, else a gpt2
  // vocabulary's own "<|endoftext|>" (GPT-2's 50256).
  int64_t separator = tok.end_of_text_id();
  if (separator < 0 && tok.gpt2() && tok.gpt2()->end_of_text() >= 0)
    separator = static_cast<int64_t>(tok.specials().size()) + tok.gpt2()->end_of_text();
  if (separator >= 0) metadata["end_of_text_id"] = std::to_string(separator);
  save_safetensors(o.out, tensors, metadata);
  fmt::print("wrote {}: {} float32 tensors, {} parameters ({}/{}.ckpt, {})\n", o.out.c_str(), tensors.size(),
             model.parameter_count(), run.dir.c_str(), run.which.c_str(), run.objective->name().c_str());
  return kExitOk;
}

// The GGUF file for llama.cpp (models/gguf_export.h), read back and checked against the run's model.
int export_gguf(const ExportOptions& o, LoadedRun& run) {
  const GgmlType dtype = o.dtype == "f32" ? GgmlType::F32 : o.dtype == "f16" ? GgmlType::F16 : GgmlType::BF16;
  run.objective->gguf_architecture();  // what llama.cpp cannot run is refused before anything is written
  LanguageModel& model = *run.model;
  const Tokenizer& tok = run.checkpoint.tokenizer;
  const std::string name = fs::path(run.dir).lexically_normal().filename().string();
  const std::string out = o.out.empty() ? run.dir + "/model-" + o.dtype + ".gguf" : o.out;
  check_output_path("--out", out, run_inputs(run.checkpoint_path, run.config));
  GgufExportOptions options{dtype, name.empty() ? "tfm" : name, exported_config(run.config).dump()};
  save_gguf(out, gguf_from_model(model, tok, options));

  // Read back with the GGUF reader and run llama.cpp's graph from the file on a probe of ids.
  const GgufFile back = load_gguf(out);
  const ModelConfig& c = model.config();
  const std::string arch = back.at("general.architecture").str();
  std::vector<int32_t> probe;
  for (int64_t t = 0; t < std::min<int64_t>(c.max_seq_len, 16); ++t)
    probe.push_back(static_cast<int32_t>((t * 7919 + 1) % c.vocab_size));
  const double erf = gguf_max_probability_diff(model, back, probe, GeluForm::Erf);
  const GgufEndOfText eot = gguf_end_of_text(tok);
  // The model's parameters as llama.cpp runs it: model.mtp_heads' extra heads are not written.
  int64_t written = 0;
  for (const auto& p : model.parameters())
    if (p.name.rfind("mtp.", 0) != 0) written += p.value.numel();
  std::printf(
      "wrote %s: llama.cpp architecture %s, %zu tensors (%s matrices, F32 vectors), %ld parameters, %s "
      "vocabulary of %ld, context %ld (%s/%s.ckpt, step %ld)\n",
      out.c_str(), arch.c_str(), back.tensors.size(), ggml_type_name(dtype), static_cast<long>(written),
      tok.kind_name().c_str(), static_cast<long>(c.vocab_size), static_cast<long>(c.max_seq_len),
      run.dir.c_str(), run.which.c_str(), static_cast<long>(run.checkpoint.state.step));
  if (arch == "gpt2") {
    const double tanh_form = gguf_max_probability_diff(model, back, probe, GeluForm::Tanh);
    const double llama = gguf_max_probability_diff(model, back, probe, GeluForm::LlamaCpp);
    std::printf(
        "read back: llama.cpp's gpt2 graph run from the file in double precision gives the run's next-token "
        "probabilities on %zu probe tokens within %.1e with tfm's GELU (erf), %.1e with GELU's tanh form, "
        "%.1e with llama.cpp's CPU GELU (tanh form through a half-precision table)\n",
        probe.size(), erf, tanh_form, llama);
  } else {
    std::printf(
        "read back: llama.cpp's %s graph run from the file in double precision gives the run's next-token "
        "probabilities on %zu probe tokens within %.1e (RoPE, RMSNorm, SwiGLU%s: no approximation in it)\n",
        arch.c_str(), probe.size(), erf, arch == "qwen3" ? ", QK-norm" : "");
  }
  // In f32 only float rounding may separate the file from the model (~1e-6): anything more is a bug here.
  if (dtype == GgmlType::F32 && erf > 1e-4) {
    std::fprintf(stderr,
                 "tfm: error: %s does not reproduce the run's model (max probability difference %.1e%s, "
                 "expected float rounding); please report it\n",
                 out.c_str(), erf, arch == "gpt2" ? " with tfm's GELU" : "");
    return kExitInternal;
  }
  std::printf("end of generation in llama.cpp: %s\n", eot.note.c_str());
  // llama.cpp's plain completion tool (llama-cli is its chat front end); -c: positions past the table
  // do not exist, so prompt and output share the model's context.
  std::printf("run it: llama-completion -m %s -c %ld -n %ld --temp 0 -no-cnv%s -p \"...\"\n", out.c_str(),
              static_cast<long>(c.max_seq_len), static_cast<long>(c.max_seq_len / 2),
              eot.id == 11 ? " --ignore-eos" : "");
  return kExitOk;
}

int run_export(const ExportOptions& o) {
  // The name's extension, whatever its case (m.GGUF is a GGUF file's name too).
  const std::string extension = ascii_lower(fs::path(o.out).extension().string());
  std::string format = o.format;
  if (format.empty()) format = extension == ".gguf" ? "gguf" : "safetensors";
  // A file named for the other format would be refused by whatever reads it by its name (sample
  // --init-from: "not a safetensors file but a GGUF file").
  const std::string other = format == "gguf" ? ".safetensors" : ".gguf";
  if (extension == other)
    throw ConfigError("--out: " + o.out + " is named for " + other.substr(1) + " but --format " + format +
                      " writes " + (format == "gguf" ? "GGUF" : "safetensors") + ": name it ." + format +
                      ", or drop --format (the name chooses it)");
  LoadedRun run = read_run(o.run, o.which);
  return format == "gguf" ? export_gguf(o, run) : export_safetensors(o, run);
}

// ---- tfm tokenizer train ----

struct TokenizerTrainOptions {
  std::string data, out, text_field = "text";
  int vocab_size = 512;
  bool skip_bad_records = false;
};

// Reads --data as a corpus, as data.path is (corpus.h: a file, a folder, a glob or a list; JSON Lines'
// --text-field; .gz and .zst decompressed), and gives its text block by block to `on_text`, documents
// joined by newlines; returns the bytes given. The bytes of a compressed file or the syntax of JSON
// Lines are not text to learn merges from. With `report`, says what was left out or skipped, and a
// corpus of no text is an error.
uint64_t read_corpus_text(const TokenizerTrainOptions& o, bool report,
                          const std::function<void(std::string_view)>& on_text) {
  CorpusOptions options;
  options.text_field = o.text_field;
  options.skip_bad_records = o.skip_bad_records;
  options.skip_option = "--skip-bad-records";
  options.text_field_option = "--text-field";
  std::vector<std::string> left_out;
  CorpusReader reader(list_corpus(o.data, &left_out), options);
  if (report)
    for (const std::string& line : left_out) std::fprintf(stderr, "tfm: warning: %s\n", line.c_str());
  uint64_t bytes = 0;
  std::string block;
  for (bool first = true; reader.next_document(); first = false) {
    if (!first) on_text("\n"), ++bytes;
    while (reader.read(block)) {
      on_text(block);
      bytes += block.size();
      block.clear();
    }
  }
  if (report && reader.skipped() > 0) {
    std::string first;
    for (const std::string& s : reader.first_skipped()) first += "; " + s;
    std::fprintf(stderr, "tfm: warning: skipped %llu bad record%s (--skip-bad-records), the first: %s\n",
                 static_cast<unsigned long long>(reader.skipped()), reader.skipped() == 1 ? "" : "s",
                 first.substr(2).c_str());
  }
  if (report && bytes == 0)
    throw ConfigError("--data: " + o.data + " holds no text to learn merges from" +
                      (reader.skipped() > 0 ? ": " + reader.skipped_text() : ""));
  return bytes;
}

int run_tokenizer_train(const TokenizerTrainOptions& o) {
  if (o.vocab_size < 256 || o.vocab_size > kBpeMaxVocab)
    throw ConfigError("--vocab-size: expected 256 to " + std::to_string(kBpeMaxVocab) + ", got " +
                      std::to_string(o.vocab_size));
  check_output_path("--out", o.out, {{"--data", o.data}});
  // Two passes over the corpus, neither holding its text: the chunk counts merges are learnt from, then
  // the tokens the merges make of it.
  const auto t0 = std::chrono::steady_clock::now();
  BpeChunkCounter counter;
  const uint64_t bytes = read_corpus_text(o, true, [&](std::string_view text) { counter.add(text); });
  const BpeTokenizer bpe = BpeTokenizer::train(counter.finish(), o.vocab_size);
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  uint64_t n_tokens = 0;
  BpeChunkCache cache;
  std::vector<int32_t> ids;
  ChunkAlignedPieces pieces([&](std::string_view text) {
    bpe.encode(text, ids, cache);
    n_tokens += ids.size();
    ids.clear();
  });
  read_corpus_text(o, false, [&](std::string_view text) { pieces.add(text); });
  pieces.finish();
  const double encode_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  bpe.save(o.out);
  fmt::print(
      "wrote {}: vocabulary {} (asked {}), {} bytes -> {} tokens ({:.2f} bytes/token); "
      "training {:.2f} s, encoding {:.2f} s\n",
      o.out.c_str(), bpe.vocab_size(), o.vocab_size, bytes, n_tokens,
      n_tokens ? static_cast<double>(bytes) / static_cast<double>(n_tokens) : 0.0, train_s, encode_s);
  return kExitOk;
}

}  // namespace

std::vector<Command> add_insight_commands(CLI::App& app) {
  std::vector<Command> commands;

  auto a = std::make_shared<AttentionOptions>();
  auto* att = app.add_subcommand("attention",
                                 "Per-head attention maps and head similarity of a run on a text (seq2seq: "
                                 "self- and cross-attention of a pair)");
  att->add_option("--run", a->run, "Run directory")->type_name("DIR")->required();
  att->add_option("--text", a->text, "Text to analyse (at most model.max_seq_len tokens)")->required();
  att->add_option("--target", a->target,
                  "seq2seq runs: the target side, teacher-forced (default: the run's greedy translation)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {  // given empty, it would mean the default silently
            return text.find_first_not_of(" \t\r\n") == std::string::npos
                       ? "empty; give the target sentence, or leave --target out for the run's greedy "
                         "translation"
                       : "";
          },
          ""));
  att->add_option("--out", a->out, "Output directory (default: DIR/attention)")->type_name("DIR");
  att->add_option("--mask-heads", a->mask_heads,
                  "Mask attention heads: LAYER:HEAD,... (0-based; their output is zero)")
      ->type_name("L:H,...");
  add_checkpoint_option(att, a->which);
  att->add_flag("--no-plot", a->no_plot, "Do not draw the SVG figures");
  att->footer(
      "\nWrites OUT/attention.json, OUT/attention_layerL.npy ((H, T, T) float32) and\n"
      "OUT/attention_layerL.svg (a heat map per head, the head-similarity matrix).\nExample:\n"
      "  tfm attention --run runs/shakespeare_char --text $'ROMEO:\\nWhat light through yonder window "
      "breaks?'   # bash's $'...' for the newline\n"
      "A seq2seq run writes attention_{encoder,decoder_self,cross}_layerL.npy and\n"
      "attention_seq2seq_layerL.svg: cross-attention has target tokens down (the token each row\n"
      "predicts) and source tokens across:\n"
      "  tfm attention --run runs/eng_fra --text \"i'm home .\"   # the run's own translation as the target\n"
      "  tfm attention --run runs/eng_fra --text \"i'm home .\" --target \"je suis chez moi .\"\n");
  commands.push_back({att, [a] { return run_attention(*a); }});

  auto e = std::make_shared<ExportOptions>();
  auto* exp = app.add_subcommand(
      "export", "Write a run's weights: safetensors (float32, tfm's names) or GGUF for llama.cpp");
  exp->add_option("--run", e->run, "Run directory")->type_name("DIR")->required();
  exp->add_option("--format", e->format,
                  "safetensors or gguf (default: gguf when --out ends in .gguf, else safetensors)")
      ->check(one_of({"safetensors", "gguf"}));
  exp->add_option("--out", e->out, "Output file (required for safetensors; gguf: DIR/model-DTYPE.gguf)")
      ->type_name("FILE");
  exp->add_option("--dtype", e->dtype, "gguf: f32, f16 or bf16 matrices (norms and biases stay f32)")
      ->capture_default_str()
      ->check(one_of({"f32", "f16", "bf16"}));
  add_checkpoint_option(exp, e->which);
  exp->footer(
      "\nsafetensors: names and shapes as torch_lm.py's (scripts/, share/tfm/scripts installed; weights "
      "(out, in) as PyTorch; an\n"
      "encoder-decoder's names are in include/tfm/models/encoder_decoder.h); metadata: objective, config\n"
      "(its local paths cut to their last names: data.path, data.tokenizer_path; data.cache_dir and\n"
      "output.dir null, in GGUF's tfm.config too), tokenizer (and target_tokenizer).\n"
      "Load with `tfm train --config CONFIG --init-from FILE` (a new run starts from the weights) or\n"
      "`tfm sample --run DIR --init-from FILE` (DIR: a run of the same model settings and vocabulary, such "
      "as\n"
      "the one exported: the file's weights with its config and tokenizer).\n"
      "\n"
      "gguf: a file llama.cpp runs (GGUF v3), for causal_lm runs of pre-norm dot-product models, tied or\n"
      "untied head, any n_kv_heads: architecture gpt2 for LayerNorm and GELU with sinusoidal or learned\n"
      "positions, llama for RoPE, RMSNorm and SwiGLU, qwen3 for those with model.qk_norm and no biases. The\n"
      "tokenizer goes with it as llama.cpp's gpt2 BPE tokenizer: bpe runs with their merges, char and byte\n"
      "vocabularies as tokens. Refused, naming the key: masked_lm and seq2seq runs, model.norm_position\n"
      "post, model.activation relu, model.attention_score additive, head gating and head mixing, the\n"
      "speedrun tricks (value_residual, bigram_buckets, x0_skip, logit_softcap), and mixes that fit no\n"
      "architecture (RoPE with LayerNorm or GELU; RMSNorm, SwiGLU or QK-norm without RoPE). "
      "model.mtp_heads'\n"
      "extra heads are left out.\n"
      "The file is read back and llama.cpp's graph run from it on a few tokens, in double precision. gpt2:\n"
      "the differences printed are with tfm's erf GELU (the export itself: float rounding), with GELU's "
      "tanh\n"
      "form, and with llama.cpp's CPU GELU (tanh form through a half-precision table: what llama.cpp "
      "shows).\n"
      "tfm's tests run real llama.cpp on exports (docs/llama_cpp.md).\n"
      "Examples:\n"
      "  tfm export --run runs/shakespeare_char --out model.safetensors\n"
      "  tfm export --run runs/shakespeare_char --format gguf                 # "
      "runs/shakespeare_char/model-f32.gguf\n"
      "  tfm export --run runs/shakespeare_char --format gguf --dtype f16 --out tiny-f16.gguf\n"
      "  llama-completion -m runs/shakespeare_char/model-f32.gguf -c 64 -n 32 --temp 0 -no-cnv --ignore-eos "
      "\\\n"
      "      -p \"ROMEO:\"\n");
  commands.push_back({exp, [e] { return run_export(*e); }});

  auto t = std::make_shared<TokenizerTrainOptions>();
  auto* tok = app.add_subcommand("tokenizer", "Byte-level BPE tokenizers");
  tok->require_subcommand(1);
  tok->footer(
      "\nExample:\n  tfm tokenizer train --data data/tinyshakespeare.txt --vocab-size 1024 --out tok.json\n");
  auto* tok_train = tok->add_subcommand("train", "Learn a byte-level BPE vocabulary from a corpus");
  tok_train
      ->add_option("--data", t->data,
                   "The corpus, in any form data.path takes: a text file, a folder, a glob, a JSON list; "
                   ".jsonl, .gz and .zst read as training reads them")
      ->type_name("PATH")
      ->required();
  tok_train->add_option("--text-field", t->text_field, "JSON Lines: the field holding each document's text")
      ->capture_default_str();
  tok_train->add_flag(
      "--skip-bad-records", t->skip_bad_records,
      "JSON Lines: skip a record that is not JSON, lacks --text-field or holds no string there "
      "(counted and named on stderr), as data.on_bad_record \"skip\" does for training");
  tok_train->add_option("--vocab-size", t->vocab_size, "Vocabulary size (256 bytes + merges)")
      ->capture_default_str()
      ->check(integer_in(256, kBpeMaxVocab));
  tok_train->add_option("--out", t->out, "Tokenizer file (JSON)")->type_name("FILE")->required();
  tok_train->footer(
      "\nExamples:\n  tfm tokenizer train --data data/tinyshakespeare.txt --vocab-size 1024 --out tok.json\n"
      "  tfm tokenizer train --data 'books/*.jsonl.gz' --text-field content --vocab-size 8192 --out "
      "tok.json\n");
  commands.push_back({tok_train, [t] { return run_tokenizer_train(*t); }});
  return commands;
}

}  // namespace tfm::cli
