// llama.cpp's graphs (gpt2, llama, qwen3: llama.cpp src/models/<arch>.cpp) run from a GGUF file in
// double precision: an oracle for the export (gguf_export.h) that needs no llama.cpp.
//
// What stays different: gpt2's GELU is the tanh approximation, and its CPU kernel rounds the input to
// half and looks the result up in a half-precision table (ggml-cpu/vec.h, GGML_GELU_FP16); tfm's is
// the exact erf form. gguf_reference_logits runs llama.cpp's graph from the file with either GELU, so
// an export reports what each part costs. llama and qwen3 have no GELU (SiLU is computed in float).
#pragma once
#include <cstdint>
#include <vector>

#include "tfm/engine/gguf.h"
#include "tfm/models/language_model.h"

namespace tfm {

// GELU as computed: tfm's exact erf form, the tanh approximation in float, or llama.cpp's CPU kernel
// (tanh form in a half table: y = half(gelu_tanh(half(x))), 0 below -10, x above 10).
enum class GeluForm { Erf, Tanh, LlamaCpp };
double gelu_of(GeluForm form, double x);

// Logits (T, V) of llama.cpp's graph for the file's general.architecture (gpt2, llama or qwen3: llama.cpp
// src/models/<arch>.cpp) for `ids`, computed from the file's tensors in double precision with the given
// GELU (gpt2's only): an oracle for the export that needs no llama.cpp. IoError naming the file when a
// key or tensor is missing or has the wrong shape, or the architecture is another.
Tensor gguf_reference_logits(const GgufFile& file, const std::vector<int32_t>& ids, GeluForm gelu);

// Max |p_tfm - p_file| over every position and token of next-token probabilities: the model's
// forward against gguf_reference_logits of the file, for `ids`.
double gguf_max_probability_diff(LanguageModel& model, const GgufFile& file, const std::vector<int32_t>& ids,
                                 GeluForm gelu);

}  // namespace tfm
