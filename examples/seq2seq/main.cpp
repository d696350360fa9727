// docs/seq2seq.md's library API as one program (the page quotes its lines, and the tests build it, so
// the page's code compiles): English-French sentence pairs and their tokenizers, one training step of the
// Transformer encoder-decoder, then greedy translation scored with BLEU (exit 1 if anything is missing).
//   seq2seq        (from the repository root: it reads data/eng-fra.txt)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tfm/data/pairs.h"
#include "tfm/engine/error.h"
#include "tfm/engine/ops.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/objectives/bleu.h"

namespace {

int translate_eng_fra() {
  using namespace tfm;
  const uint64_t seed = 1;
  const int64_t batch_size = 8;
  const std::vector<int64_t> indices = {0, 1, 2};  // the validation pairs translated below
  PairOptions o;                                   // word tokenizers both sides; d2l uses min_freq = 2
  o.min_freq = 2;
  o.max_source_len = o.max_target_len = 10;           // tokens before <eos>; max_seq_len must be >= 11
  PairDataset d = load_pairs("data/eng-fra.txt", o);  // shuffled by o.seed; d.val keeps the raw text
  // Evaluating a trained run: load_pairs(path, o, saved_source_tokenizer, saved_target_tokenizer).

  ModelConfig c;  // vocab_size = target side, source_vocab_size = source side
  c.vocab_size = d.target_tokenizer.size();
  c.source_vocab_size = d.source_tokenizer.size();
  c.n_encoder_layers = c.n_decoder_layers = 2;
  c.norm_position = NormPosition::Post;  // d2l's AddNorm
  Seq2SeqModel model(c, seed);
  PairSampler sampler(seed);  // sampler.rng() goes into checkpoints
  PairBatch b = make_pair_batch(d.train, sampler.sample(d.train.size(), batch_size));
  Tensor logits = model.forward(b.src, b.src_lengths, b.B, b.S, b.tgt_in, b.T);  // (B, T, V)
  Tensor loss = cross_entropy(logits, b.tgt_out, kPadId);  // mean over b.real_target_tokens
  loss.backward();                                         // into model.flat_grads(), as the LM

  TranslateOptions t;  // beam 1 = greedy; t.beam = 4, t.alpha = 0.6 (GNMT length penalty)
  PairBatch v = make_pair_batch(d.val, indices);
  auto ids = model.translate(v.src, v.src_lengths, v.B, v.S, t);  // without <bos>/<eos>
  std::vector<Tokens> hyps, refs;
  for (size_t i = 0; i < ids.size(); ++i) {
    hyps.push_back(d.target_tokenizer.decode_tokens(ids[i]));  // words, for BLEU
    refs.push_back(d.target_tokenizer.decode_tokens(d.val[indices[i]].tgt));
  }
  BleuScore s = corpus_bleu(hyps, refs);                 // sacreBLEU, tokenize='none', smooth 'exp', 0-100
  double d2l = d2l_bleu(hyps[0], refs[0], 2);            // d2l's table: "go . => va !, bleu 1.000"
  std::string text = d.target_tokenizer.decode(ids[0]);  // detokenized: "va!"

  std::printf("%zu training pairs, %ld source and %ld target ids; one step's loss %.4f\n", d.train.size(),
              static_cast<long>(c.source_vocab_size), static_cast<long>(c.vocab_size), loss.item());
  std::printf("\"%s\" -> \"%s\" (untrained: corpus BLEU %.2f, d2l BLEU %.3f)\n",
              d.val[indices[0]].source.c_str(), text.c_str(), s.score, d2l);
  return std::isfinite(loss.item()) && ids.size() == indices.size() ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return translate_eng_fra();
  } catch (const tfm::Error& e) {  // IoError: no data/eng-fra.txt in the working directory
    std::fprintf(stderr, "seq2seq: %s\n", e.what());
    return 2;
  }
}
