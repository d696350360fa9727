// Loads a run's checkpoint (written by `tfm train`) and generates text from a prompt:
//   generate RUN_DIR [PROMPT]
#include <cstdio>
#include <string>

#include "tfm/engine/error.h"
#include "tfm/models/sampling.h"
#include "tfm/training/run_dir.h"

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: %s RUN_DIR [PROMPT]\n", argv[0]), 2;
  try {
    tfm::LoadedRun run = tfm::load_run(argv[1], "last");  // config, tokenizer and weights of last.ckpt
    tfm::SampleOptions options;
    options.prompt = argc > 2 ? argv[2] : "ROMEO:";
    options.max_new_tokens = 200;
    options.temperature = 0.8;
    options.top_k = 40;
    std::fputs(options.prompt.c_str(), stdout);
    size_t bytes = 0;  // streamed, so generate() keeps none of the text
    tfm::generate(*run.model, run.checkpoint.tokenizer, options, [&bytes](const std::string& piece) {
      std::fputs(piece.c_str(), stdout);  // streams as it goes
      std::fflush(stdout);
      bytes += piece.size();
    });
    std::printf("\n[%zu bytes from step %ld of %s]\n", bytes, static_cast<long>(run.checkpoint.state.step),
                argv[1]);
    return bytes == 0 ? 1 : 0;
  } catch (const tfm::Error& e) {  // IoError / ConfigError: a missing or bad run directory
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 2;
  }
}
