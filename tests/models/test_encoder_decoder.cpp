// The encoder-decoder's library half (docs/seq2seq.md): the word tokenizer and specials, sentence pairs and
// batches, BLEU, DecoderBlock and Seq2SeqModel gradients, cached and beam decoding against full
// recomputation, causality and source padding.
// Legend: B batch, S source length, T target length, C = d_model, V target vocabulary.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "cli_run.h"
#include "fixture_compare.h"
#include "gradcheck.h"
#include "model_config.h"
#include "tfm/data/pairs.h"
#include "tfm/engine/ops.h"
#include "tfm/models/encoder_decoder.h"
#include "tfm/models/language_model.h"
#include "tfm/nn/blocks.h"
#include "tfm/objectives/bleu.h"

using namespace tfm;
using tfm_test::model_config_from;

namespace {

std::string write_file(const tfm_test::TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.path + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// The error message of f(), or "" when it does not throw.
template <class F>
std::string decoder_error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

ModelConfig tiny_config_encoder_decoder(const std::string& norm, int64_t n_enc = 2, int64_t n_dec = 2) {
  ModelConfig c = model_config_from(
      {"train.objective=seq2seq", "model.d_model=16", "model.n_heads=2", "model.n_kv_heads=2",
       "model.d_ff=32", "model.max_seq_len=12", "model.n_encoder_layers=" + std::to_string(n_enc),
       "model.n_decoder_layers=" + std::to_string(n_dec), "model.norm_position=" + norm},
      13);
  c.source_vocab_size = 11;  // the source side's tokenizer, not a key
  return c;
}

// The modern options (docs/architecture.md): RoPE in the encoder's and the decoder's self-attention
// (cross-attention has no positions), RMSNorm, SwiGLU, QK-norm.
void use_modern_options(ModelConfig& c) {
  c.positional_encoding = PositionalEncoding::Rope, c.rope_theta = 200.0;
  c.norm = NormKind::RMSNorm, c.activation = Activation::SwiGLU, c.qk_norm = true;
}

// Parameters scaled away from the 0.02 init so attention is not uniform and decoding has clear choices.
void spread_parameters(Seq2SeqModel& m, uint64_t seed, float std = 0.3f) {
  Rng rng(seed);
  for (const NamedParameter& p : m.parameters()) {
    Tensor v = p.value;
    if (v.dim() >= 2) v.copy_from(Tensor::randn(v.shape(), rng, 0.0f, std));
  }
}

std::vector<int32_t> random_ids(int64_t n, int64_t lo, int64_t hi, Rng& rng) {
  std::vector<int32_t> ids(n);
  for (auto& id : ids)
    id = static_cast<int32_t>(lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo))));
  return ids;
}

using testing::max_abs_diff;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Tokenizers

TEST_CASE("seq2seq: word tokenizer follows d2l's preprocessing", "[seq2seq][data]") {
  using V = std::vector<std::string>;
  CHECK(Tokenizer::split_words("Go.", "t") == V{"go", "."});
  CHECK(Tokenizer::split_words("Va !", "t") == V{"va", "!"});
  // U+202F and U+00A0 (French spacing before ! and ?) are spaces; É, È, Œ, Ÿ lowercase.
  CHECK(
      Tokenizer::split_words("\xc3\x89T\xc3\x89\xe2\x80\xaf!  \xc3\x80 \xc5\x92uf\xc2\xa0? \xc5\xb8", "t") ==
      V{"\xc3\xa9t\xc3\xa9", "!", "\xc3\xa0", "\xc5\x93uf", "?", "\xc3\xbf"});
  CHECK(Tokenizer::split_words("Hello, world...", "t") == V{"hello", ",", "world", ".", ".", "."});
  CHECK(Tokenizer::split_words("I'm home.", "t") == V{"i'm", "home", "."});
  CHECK(decoder_error_of([] {
          Tokenizer::split_words("a\xff", "pairs.txt:3");
        }).rfind("pairs.txt:3: invalid UTF-8", 0) == 0);
}

TEST_CASE("seq2seq: word vocabulary by frequency with min_freq, specials, unk and detokenize",
          "[seq2seq][data]") {
  const Tokenizer base = Tokenizer::from_texts(Tokenizer::Kind::Word, {"b a c b.", "c b d."}, "t", 2);
  // b x3, c x2, . x2 kept (frequency desc, then bytewise: "." < "c"); a, d once: dropped.
  CHECK(base.words() == std::vector<std::string>{"b", ".", "c"});
  CHECK(base.size() == 3);
  CHECK(base.encode("B c.", "t") == std::vector<int32_t>{0, 2, 1});
  const std::string err = decoder_error_of([&] { base.encode("b a", "line 7"); });
  CHECK(err.rfind("line 7: word \"a\"", 0) == 0);

  const Tokenizer tok = base.with_specials(seq2seq_specials());
  CHECK(tok.size() == 7);
  CHECK(tok.special_id("<eos>") == kEosId);
  CHECK(tok.special_id("<mask>") == -1);
  CHECK(tok.encode("B a c.", "t") == std::vector<int32_t>{4, kUnkId, 6, 5});
  // Specials but <unk> are skipped; punctuation loses its space again.
  CHECK(tok.decode({kBosId, 4, kUnkId, 6, 5, kEosId, kPadId}) == "b <unk> c.");
  CHECK(tok.decode_tokens({kBosId, 4, 6, 5, kEosId}) == std::vector<std::string>{"b", "c", "."});

  // JSON round trip keeps the words and specials.
  const Tokenizer back = Tokenizer::from_json(tok.to_json());
  CHECK(back.kind() == Tokenizer::Kind::Word);
  CHECK(back.words() == tok.words());
  CHECK(back.specials() == tok.specials());
  CHECK(back.encode("c b x", "t") == std::vector<int32_t>{6, 4, kUnkId});
}

TEST_CASE("seq2seq: specials on char and byte tokenizers, old JSON loads", "[seq2seq][data]") {
  const Tokenizer chars =
      Tokenizer::from_texts(Tokenizer::Kind::Char, {"ab", "ba c"}, "t").with_specials(seq2seq_specials());
  // Base symbols ' ', a, b, c at 4..7.
  CHECK(chars.size() == 8);
  CHECK(chars.encode("ca?", "t") == std::vector<int32_t>{7, 5, kUnkId});
  CHECK(chars.decode({kBosId, 7, 5, kUnkId, kEosId}) == "ca<unk>");
  const Tokenizer bytes =
      Tokenizer::from_text(Tokenizer::Kind::Byte, "", "t").with_specials(seq2seq_specials());
  CHECK(bytes.size() == 260);
  CHECK(bytes.encode("A", "t") == std::vector<int32_t>{65 + 4});
  // A checkpoint written before specials existed.
  const Tokenizer old = Tokenizer::from_json(nlohmann::json{{"kind", "char"}, {"symbols", {97, 98}}});
  CHECK(old.specials().empty());
  CHECK(old.encode("ba", "t") == std::vector<int32_t>{1, 0});
  CHECK(!decoder_error_of([&] { old.encode("c", "t"); }).empty());
  CHECK(Tokenizer::from_json(bytes.to_json()).encode("A", "t") == std::vector<int32_t>{69});
}

// ---------------------------------------------------------------------------------------------
// Sentence pairs

TEST_CASE("seq2seq: pairs are shuffled by the seed, split, tokenized from train and truncated",
          "[seq2seq][data]") {
  tfm_test::TempDir dir("seq2seq_pairs");
  std::string text;
  for (int i = 0; i < 20; ++i)
    text += "w" + std::to_string(i) + " x y.\tm" + std::to_string(i) + " n !\tattribution " +
            std::to_string(i) + "\n";
  text += "\n";  // a blank line is skipped
  const std::string path = write_file(dir, "pairs.txt", text);
  PairOptions o;
  o.val_fraction = 0.25;
  o.seed = 5;
  const PairDataset d = load_pairs(path, o);
  REQUIRE(d.train.size() == 15);
  REQUIRE(d.val.size() == 5);
  // The same seed gives the same order; another seed another; every line appears once.
  const PairDataset same = load_pairs(path, o);
  o.seed = 6;
  const PairDataset other = load_pairs(path, o);
  std::vector<int64_t> lines, lines_same, lines_other;
  for (const auto* ds : {&d, &same, &other})
    for (const auto* split : {&ds->train, &ds->val})
      for (const SentencePair& p : *split)
        (ds == &d ? lines : ds == &same ? lines_same : lines_other).push_back(p.line);
  CHECK(lines == lines_same);
  CHECK(lines != lines_other);
  CHECK(std::set<int64_t>(lines.begin(), lines.end()).size() == 20);
  // The shuffle is Fisher-Yates over Rng(seed).
  std::vector<int64_t> expected(20);
  for (int i = 0; i < 20; ++i) expected[i] = i + 1;
  Rng rng(5);
  for (size_t i = expected.size(); i > 1; --i) std::swap(expected[i - 1], expected[rng.below(i)]);
  CHECK(lines == expected);

  // Raw text kept; the third column ignored; vocabularies from the training pairs only.
  const SentencePair& v0 = d.val[0];
  CHECK(v0.source == "w" + std::to_string(v0.line - 1) + " x y.");
  CHECK(v0.target == "m" + std::to_string(v0.line - 1) + " n !");
  CHECK(d.source_tokenizer.specials() == seq2seq_specials());
  CHECK(d.source_tokenizer.size() == 4 + 15 + 3);  // 15 training w<i>, x, y, "."
  CHECK(v0.src[0] == kUnkId);                      // w<i> of a validation line is unseen
  CHECK(d.source_tokenizer.decode(d.train[0].src) == d.train[0].source);
  CHECK(d.target_tokenizer.decode(d.train[0].tgt) == "m" + std::to_string(d.train[0].line - 1) + " n!");

  // min_freq 2 keeps the shared words; truncation counts tokens before <eos>; max_pairs reads the first
  // lines.
  o.min_freq = 2;
  o.max_source_len = 2;
  o.max_pairs = 8;
  o.val_fraction = 0.1;  // floor(0.8) = 0, but at least one pair validates
  const PairDataset t = load_pairs(path, o);
  CHECK(t.train.size() == 7);
  CHECK(t.val.size() == 1);
  CHECK(t.source_tokenizer.words() == std::vector<std::string>{".", "x", "y"});
  for (const auto* split : {&t.train, &t.val})
    for (const SentencePair& p : *split) {
      CHECK(p.line <= 8);
      CHECK(p.src == std::vector<int32_t>{kUnkId, 5});
      CHECK(p.tgt.size() == 3);
    }
  // Existing tokenizers (evaluating a trained run).
  const PairDataset e = load_pairs(path, PairOptions{}, d.source_tokenizer, d.target_tokenizer);
  CHECK(e.source_tokenizer.words() == d.source_tokenizer.words());
}

TEST_CASE("seq2seq: a BPE source side from its tokenizer file, a byte target side", "[seq2seq][data]") {
  tfm_test::TempDir dir("seq2seq_pairs_bpe");
  const std::string path = write_file(dir, "pairs.txt", "low lower\tbas\nlowest low\tplus bas\nnew\tneuf\n");
  const std::string bpe = dir.path + "/bpe.json";
  BpeTokenizer::train("low lower lowest low low", 260).save(bpe);
  PairOptions o;
  o.val_fraction = 0.0;
  o.source_tokenizer = "bpe";
  o.source_tokenizer_path = bpe;
  o.target_tokenizer = "byte";
  const PairDataset d = load_pairs(path, o);
  CHECK(d.source_tokenizer.kind() == Tokenizer::Kind::Bpe);
  CHECK(d.source_tokenizer.size() == 4 + 260);
  CHECK(d.target_tokenizer.size() == 4 + 256);
  for (const SentencePair& p : d.train) {
    CHECK(d.source_tokenizer.decode(p.src) == p.source);
    CHECK(d.target_tokenizer.decode(p.tgt) == p.target);
    CHECK(p.tgt.size() == p.target.size());
    if (p.source.rfind("low", 0) == 0) CHECK(p.src.size() < p.source.size());  // merges used
    for (int32_t id : p.src) CHECK(id >= 4);
  }
  // A file saved by Windows Notepad: a byte order mark before the first pair, CRLF line ends.
  const std::string windows = write_file(dir, "windows.txt", "\xEF\xBB\xBFlow lower\tbas\r\nnew\tneuf\r\n");
  const PairDataset w = load_pairs(windows, o);
  REQUIRE(w.train.size() == 2);
  for (const SentencePair& p : w.train) CHECK(p.source == (p.line == 1 ? "low lower" : "new"));
  o.source_tokenizer_path = dir.path + "/missing.json";
  CHECK(decoder_error_of([&] { load_pairs(path, o); }).rfind("data.tokenizer_path: ", 0) == 0);
}

TEST_CASE("seq2seq: pair file errors name file:line and what is wrong", "[seq2seq][data]") {
  tfm_test::TempDir dir("seq2seq_pair_errors");
  const std::string no_tab = write_file(dir, "a.txt", "Go.\tVa !\nHi. Salut !\n");
  CHECK(decoder_error_of([&] {
          load_pairs(no_tab, PairOptions{});
        }).rfind(no_tab + ":2: expected source<TAB>target", 0) == 0);
  const std::string empty_side = write_file(dir, "b.txt", "Go.\tVa !\n\nHi.\t \n");
  CHECK(decoder_error_of([&] { load_pairs(empty_side, PairOptions{}); }) ==
        empty_side + ":3: the target sentence is empty");
  const std::string bad_utf8 = write_file(dir, "c.txt", "Go.\tVa !\nHi.\tSalut \xc3\n");
  CHECK(decoder_error_of([&] {
          load_pairs(bad_utf8, PairOptions{});
        }).rfind(bad_utf8 + ":2: invalid UTF-8 at byte offset 10", 0) == 0);
  CHECK(decoder_error_of([&] { load_pairs(write_file(dir, "d.txt", ""), PairOptions{}); }).find("is empty") !=
        std::string::npos);
  CHECK_THROWS_AS(load_pairs(dir.path + "/missing.txt", PairOptions{}), IoError);
  PairOptions one;
  one.val_fraction = 0.5;
  const std::string single = write_file(dir, "e.txt", "Go.\tVa !\n");
  CHECK_THROWS_AS(load_pairs(single, one), ConfigError);  // no pair left to train
  one.val_fraction = 0.0;
  one.min_freq = 0;
  CHECK_THROWS_AS(load_pairs(single, one), ConfigError);
  // Existing tokenizers must carry the seq2seq specials.
  const Tokenizer plain = Tokenizer::from_text(Tokenizer::Kind::Word, "go va", "t");
  one.min_freq = 1;
  CHECK(load_pairs(single, one, plain.with_specials(seq2seq_specials()),
                   plain.with_specials(seq2seq_specials()))
            .train.size() == 1);
  CHECK(decoder_error_of([&] { load_pairs(single, one, plain, plain); }).find("must carry the specials") !=
        std::string::npos);
}

TEST_CASE("seq2seq: the eng-fra excerpt loads with d2l's tokens", "[seq2seq][data]") {
  PairOptions o;
  o.val_fraction = 0.0;
  const PairDataset d = load_pairs(std::string(TFM_SOURCE_DIR) + "/tests/fixtures/eng_fra_head.txt", o);
  REQUIRE(d.train.size() == 12);
  // Go. x3, Hi. x2, Run! x7: each source once, with all of its targets.
  const auto groups = group_by_source(d.train);
  std::map<std::string, size_t> group_sizes;
  for (const auto& g : groups) {
    for (int64_t i : g) CHECK(d.train[i].source == d.train[g[0]].source);
    group_sizes[d.train[g[0]].source] = g.size();
  }
  CHECK(group_sizes.size() == groups.size());
  CHECK(group_sizes["Go."] == 3);
  CHECK(group_sizes["Hi."] == 2);
  CHECK(group_sizes["Run!"] == 7);
  for (const SentencePair& p : d.train)
    if (p.line == 1) {
      CHECK(d.source_tokenizer.decode_tokens(p.src) == std::vector<std::string>{"go", "."});
      CHECK(d.target_tokenizer.decode_tokens(p.tgt) == std::vector<std::string>{"va", "!"});
    }
}

TEST_CASE("seq2seq: batches pad, append <eos> to the source and shift the target", "[seq2seq][data]") {
  std::vector<SentencePair> pairs(3);
  pairs[0].src = {7, 8, 9};
  pairs[0].tgt = {5};
  pairs[1].src = {6};
  pairs[1].tgt = {4, 5, 6};
  pairs[2].src = {4, 4};
  pairs[2].tgt = {9, 9};
  const PairBatch b = make_pair_batch(pairs, {1, 0});
  CHECK(b.B == 2);
  CHECK(b.S == 4);
  CHECK(b.T == 4);
  CHECK(b.src == std::vector<int32_t>{6, kEosId, kPadId, kPadId, 7, 8, 9, kEosId});
  CHECK(b.src_lengths == std::vector<int64_t>{2, 4});
  CHECK(b.tgt_in == std::vector<int32_t>{kBosId, 4, 5, 6, kBosId, 5, kPadId, kPadId});
  CHECK(b.tgt_out == std::vector<int32_t>{4, 5, 6, kEosId, 5, kEosId, kPadId, kPadId});
  CHECK(b.real_source_tokens == 6);
  CHECK(b.real_target_tokens == 6);
  CHECK_THROWS(make_pair_batch(pairs, {3}));

  PairSampler s1(3), s2(3);
  const auto a = s1.sample(3, 16);
  CHECK(a == s2.sample(3, 16));
  CHECK(std::set<int64_t>(a.begin(), a.end()) == std::set<int64_t>{0, 1, 2});
  const Rng::State saved = s1.rng().state();
  const auto next = s1.sample(3, 8);
  s2.rng().set_state(saved);
  CHECK(s2.sample(3, 8) == next);
}

// ---------------------------------------------------------------------------------------------
// BLEU

TEST_CASE("seq2seq: corpus BLEU by hand", "[seq2seq][bleu]") {
  const Tokens hyp = split_whitespace("the cat sat on the mat"),
               ref = split_whitespace("the cat is on the mat");
  // Clipped matches: 1-grams 5/6 (the x2, cat, on, mat), 2-grams 3/5, 3-grams 1/4, 4-grams 0/3.
  const BleuScore s4 = sentence_bleu(hyp, ref);
  CHECK(s4.matches == std::vector<int64_t>{5, 3, 1, 0});
  CHECK(s4.totals == std::vector<int64_t>{6, 5, 4, 3});
  // No 4-gram matches: sacreBLEU's default smoothing takes p_4 = 1 / (2 * 3), 'none' gives 0.
  CHECK(s4.score == Approx(100.0 * std::pow(5.0 / 6.0 * 3.0 / 5.0 * 1.0 / 4.0 * 1.0 / 6.0, 0.25)));
  CHECK(sentence_bleu(hyp, ref, 4, BleuSmoothing::None).score == 0.0);
  CHECK(s4.precisions[0] == Approx(100.0 * 5 / 6));
  CHECK(s4.precisions[3] == 0.0);  // the precisions are the unsmoothed ones
  // Two orders without a match: the second's p_n = 1 / (4 total_n).
  CHECK(bleu_from_counts({4, 2, 0, 0}, {6, 5, 4, 3}, 6, 6).score ==
        Approx(100.0 * std::pow(4.0 / 6.0 * 2.0 / 5.0 / (2.0 * 4.0) / (4.0 * 3.0), 0.25)));
  // No unigram in common, or no n-gram of some order (hypotheses shorter than n): 0.
  CHECK(bleu_from_counts({0, 0, 0, 0}, {4, 3, 2, 1}, 4, 4).score == 0.0);
  CHECK(bleu_from_counts({3, 2, 1, 0}, {3, 2, 1, 0}, 3, 3).score == 0.0);
  const BleuScore s3 = sentence_bleu(hyp, ref, 3);
  CHECK(s3.score == Approx(50.0));  // (5/6 * 3/5 * 1/4)^(1/3) = 0.5
  CHECK(s3.bp == 1.0);
  // Brevity penalty exp(1 - r/c) = exp(1 - 4/2).
  const BleuScore short_hyp =
      sentence_bleu(split_whitespace("the cat"), split_whitespace("the cat sat on"), 2);
  CHECK(short_hyp.bp == Approx(std::exp(-1.0)));
  CHECK(short_hyp.score == Approx(100.0 * std::exp(-1.0)));
  CHECK(short_hyp.sys_len == 2);
  CHECK(short_hyp.ref_len == 4);
  // Counts are summed over the corpus before the geometric mean (not an average of sentence scores).
  const BleuScore corpus =
      corpus_bleu(std::vector<std::string>{"a b c d", "a b"}, std::vector<std::string>{"a b c d", "a c"});
  CHECK(corpus.matches == std::vector<int64_t>{5, 3, 2, 1});
  CHECK(corpus.totals == std::vector<int64_t>{6, 4, 2, 1});
  CHECK(corpus.score == Approx(100.0 * std::pow(5.0 / 6.0 * 3.0 / 4.0, 0.25)));
  // A perfect match is 100 to the bit (tfm translate --json printed 100.00000000000004).
  CHECK(corpus_bleu(std::vector<std::string>{"a b c d e"}, std::vector<std::string>{"a b c d e"}).score ==
        100.0);
  CHECK_THROWS(corpus_bleu(std::vector<std::string>{"a"}, std::vector<std::string>{}));
}

TEST_CASE("seq2seq: BLEU equals sacreBLEU's own test values", "[seq2seq][bleu]") {
  // sacreBLEU test/test_bleu.py: test_case_statistics, test_case_scoring, and corpus_bleu with
  // tokenize='none' on its README example (two references per sentence) = 49.1919566.
  const BleuScore stats = sentence_bleu(split_whitespace("am I am a character sequence"),
                                        split_whitespace("I am a symbol string sequence a a"));
  CHECK(stats.matches == std::vector<int64_t>{4, 2, 1, 0});
  CHECK(stats.totals == std::vector<int64_t>{6, 5, 4, 3});
  CHECK(bleu_from_counts({9, 7, 5, 3}, {10, 8, 6, 4}, 11, 11).score == Approx(83.75922397).epsilon(1e-9));
  const std::vector<std::string> hyps = {"The dog bit the man.", "It wasn't surprising.",
                                         "The man had just bitten him."};
  const std::vector<std::vector<std::string>> streams = {
      {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
      {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};
  std::vector<Tokens> h;
  std::vector<std::vector<Tokens>> refs(hyps.size());
  for (size_t i = 0; i < hyps.size(); ++i) {
    h.push_back(split_whitespace(hyps[i]));
    for (const auto& stream : streams) refs[i].push_back(split_whitespace(stream[i]));
  }
  CHECK(corpus_bleu(h, refs).score == Approx(49.1919566).epsilon(1e-9));
  CHECK(corpus_bleu(std::vector<Tokens>(3), refs).score == 0.0);  // empty hypotheses
  // test/test_sentence_bleu.py: one sentence with no 3- or 4-gram match, tokenize='none', smooth_method
  // 'exp' (its default) = 7.347 (to 1e-3); the same with tokenize '13a' and 'none' smoothing = 0.
  const Tokens sys = split_whitespace(
                   "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;"),
               ref = split_whitespace("producţia de zahăr brut se exprimă în zahăr alb;");
  CHECK(sentence_bleu(sys, ref).score == Approx(7.347).margin(1e-3));
  CHECK(sentence_bleu(sys, ref, 4, BleuSmoothing::None).score == 0.0);
  CHECK(sentence_bleu(split_whitespace("this is a cat"), split_whitespace("okay thanks")).score == 0.0);
  // sentence_bleu takes sacreBLEU's effective order: a sentence shorter than 4 tokens is scored on the
  // orders it has n-grams of (sacreBLEU: sentence_bleu("va !", ["va !"]) = 100), where a corpus of one
  // scores 0 for want of a 4-gram.
  CHECK(sentence_bleu(split_whitespace("va !"), split_whitespace("va !")).score == 100.0);
  CHECK(corpus_bleu(std::vector<std::string>{"va !"}, std::vector<std::string>{"va !"}).score == 0.0);
  const BleuScore three =
      sentence_bleu(split_whitespace("the cat sat"), split_whitespace("the cat sat down"));
  CHECK(three.score == Approx(100.0 * std::exp(1.0 - 4.0 / 3.0)));  // p1..p3 = 1, brevity penalty
  CHECK(bleu_from_counts({3, 2, 1, 0}, {3, 2, 1, 0}, 3, 3, BleuSmoothing::Exp, true).score == 100.0);
  CHECK(bleu_from_counts({2, 0, 0, 0}, {3, 2, 1, 0}, 3, 3, BleuSmoothing::Exp, true).score ==
        Approx(100.0 * std::pow(2.0 / 3.0 / (2.0 * 2.0) / (4.0 * 1.0), 1.0 / 3.0)));
  CHECK(sentence_bleu({}, split_whitespace("va !")).score == 0.0);
}

TEST_CASE("seq2seq: d2l's BLEU", "[seq2seq][bleu]") {
  CHECK(d2l_bleu({"va", "!"}, {"va", "!"}, 2) == Approx(1.0));
  // p1 = 3/4, p2 = 1/3, weights 1/2 and 1/4.
  CHECK(d2l_bleu(split_whitespace("il est bon ."), split_whitespace("il est calme ."), 2) ==
        Approx(std::pow(0.75, 0.5) * std::pow(1.0 / 3.0, 0.25)));
  // A short prediction: exp(min(0, 1 - 4/2)).
  CHECK(d2l_bleu(split_whitespace("il est"), split_whitespace("il est calme ."), 2) ==
        Approx(std::exp(-1.0)));
  // n stops at len_pred: a one-word exact prediction with k = 4 has only p1.
  CHECK(d2l_bleu({"va"}, {"va"}, 4) == Approx(1.0));
  CHECK(d2l_bleu({}, {"va"}, 2) == 0.0);
}

// ---------------------------------------------------------------------------------------------
// DecoderBlock and the model's gradients

TEST_CASE("seq2seq: DecoderBlock gradient check with source padding, pre and post norm",
          "[seq2seq][gradcheck]") {
  for (const char* norm : {"pre", "post"}) {
    DYNAMIC_SECTION(norm << "-norm") {
      ModelConfig cfg;
      cfg.d_model = 8;
      cfg.n_heads = 2;
      cfg.d_ff = 12;
      cfg.norm_position = *enum_from<NormPosition>(norm);
      DecoderBlock block(cfg);
      Rng rng(3);
      std::vector<Tensor> inputs = {Tensor::randn({2, 3, 8}, rng),
                                    Tensor::randn({2, 4, 8}, rng)};  // x, memory
      for (auto& [name, t] : block.named_parameters()) {
        t->copy_from(Tensor::randn(t->shape(), rng, 0.0f, 0.5f));
        inputs.push_back(*t);
      }
      testing::check_gradients(
          [&](const std::vector<Tensor>& in) {
            return block.forward(in[0], in[1], {4, 2});
          },
          inputs);
    }
  }
}

TEST_CASE("seq2seq: model gradient check with source padding and S != T, pre and post norm",
          "[slow][seq2seq][gradcheck]") {
  for (const char* norm : {"pre", "post", "modern"}) {
    DYNAMIC_SECTION(norm << "-norm") {
      const bool modern = std::string(norm) == "modern";  // pre-norm with RoPE, RMSNorm, SwiGLU, QK-norm
      ModelConfig c = tiny_config_encoder_decoder(modern ? "pre" : norm, 1, 1);
      c.d_model = 8;
      c.d_ff = 12;
      c.vocab_size = 7;
      c.source_vocab_size = 6;
      c.tie_embeddings = std::string(norm) == "pre";
      if (modern) use_modern_options(c);
      Seq2SeqModel model(c, 1);
      spread_parameters(model, 2, 0.4f);
      const std::vector<int32_t> src = {1, 2, 3, 4, 5, 2, 0, 0};  // (2, 4), lengths 4 and 2
      const std::vector<int32_t> tgt = {1, 3, 4, 1, 6, 2};        // (2, 3)
      const std::vector<int32_t> out = {3, 4, 2, 6, 2, 0};
      std::vector<Tensor> params;
      for (const NamedParameter& p : model.parameters()) params.push_back(p.value);
      testing::check_gradients(
          [&](const std::vector<Tensor>&) {
            const Tensor logits = model.forward(src, {4, 2}, 2, 4, tgt, 3);  // (2, 3, V)
            return logits + cross_entropy(logits, out, kPadId);
          },
          params);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decoding

TEST_CASE("seq2seq: cached decoding equals the full decoder, causality and source padding", "[seq2seq]") {
  for (const char* norm : {"pre", "post"}) {
    // post-norm also with multi-query attention and additive scoring (its own masking path); pre-norm
    // with the modern options (RoPE in both stacks' self-attention, absolute positions in the cache)
    DYNAMIC_SECTION(norm << "-norm") {
      ModelConfig c = tiny_config_encoder_decoder(norm);
      if (std::string(norm) == "post") c.n_kv_heads = 1, c.attention_score = AttentionScore::Additive;
      if (std::string(norm) == "pre") use_modern_options(c);
      Seq2SeqModel model(c, 4);
      spread_parameters(model, 5);
      Rng rng(9);
      const int64_t B = 3, S = 5, T = 6;
      std::vector<int32_t> src = random_ids(B * S, 4, 11, rng), tgt = random_ids(B * T, 1, 13, rng);
      const std::vector<int64_t> lengths = {5, 2, 3};
      const Tensor full = model.forward(src, lengths, B, S, tgt, T);  // (B, T, V)

      // Cached: the target in chunks of 2, 1 and 3 positions.
      NoGradGuard no_grad;
      const Tensor memory = model.encode(src, lengths, B, S);
      Seq2SeqCache cache = model.make_cache(memory, lengths);
      int64_t start = 0;
      for (int64_t n : {2, 1, 3}) {
        std::vector<int32_t> chunk;
        for (int64_t b = 0; b < B; ++b)
          chunk.insert(chunk.end(), tgt.begin() + b * T + start, tgt.begin() + b * T + start + n);
        const Tensor step = model.forward_cached(cache, chunk, n);  // (B, n, V)
        CHECK(max_abs_diff(step, narrow(full, 1, start, n)) <= 1e-5);
        start += n;
      }
      CHECK(cache.length == T);

      // Causality: a later target token changes nothing before it.
      std::vector<int32_t> changed = tgt;
      changed[1 * T + 3] = changed[1 * T + 3] == 5 ? 6 : 5;
      const Tensor other = model.forward(src, lengths, B, S, changed, T);
      CHECK(max_abs_diff(narrow(other, 1, 0, 3), narrow(full, 1, 0, 3)) == 0.0);
      CHECK(max_abs_diff(narrow(other, 1, 3, 1), narrow(full, 1, 3, 1)) > 1e-4);

      // Source padding: padded tokens change nothing and get zero cross-attention.
      std::vector<int32_t> repadded = src;
      for (int64_t j = 2; j < S; ++j) repadded[1 * S + j] = 7;
      model.set_record_attention(true);
      const Tensor padded = model.forward(repadded, lengths, B, S, tgt, T);
      CHECK(max_abs_diff(padded, full) == 0.0);
      REQUIRE(model.decoder_cross_attention().size() == 2);
      REQUIRE(model.encoder_attention().size() == 2);
      REQUIRE(model.decoder_self_attention().size() == 2);
      const Tensor cross = model.decoder_cross_attention()[1];  // (B, H, T, S)
      CHECK(cross.shape() == Shape{B, 2, T, S});
      CHECK(model.decoder_self_attention()[0].shape() == Shape{B, 2, T, T});
      CHECK(model.encoder_attention()[0].shape() == Shape{B, 2, S, S});
      double padded_mass = 0, real_mass = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t i = 0; i < T; ++i)
            for (int64_t j = 0; j < S; ++j)
              (j >= lengths[b] ? padded_mass : real_mass) += cross.at({b, h, i, j});
      CHECK(padded_mass == 0.0);
      CHECK(real_mass == Approx(B * 2 * T));
    }
  }
}

TEST_CASE("seq2seq: greedy and beam search, with the cache and recomputing the decoder", "[seq2seq]") {
  ModelConfig c = tiny_config_encoder_decoder("pre");
  c.max_seq_len = 10;
  Seq2SeqModel model(c, 11);
  spread_parameters(model, 12, 0.5f);
  Rng rng(13);
  const int64_t B = 4, S = 5;
  const std::vector<int32_t> src = random_ids(B * S, 4, 11, rng);
  const std::vector<int64_t> lengths = {5, 3, 1, 4};

  // Greedy by hand: argmax of the full decoder over the growing prefix, one source at a time.
  std::vector<std::vector<int32_t>> reference(B);
  {
    NoGradGuard no_grad;
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int32_t> one(src.begin() + b * S, src.begin() + (b + 1) * S);
      const Tensor memory = model.encode(one, {lengths[b]}, 1, S);
      std::vector<int32_t> prefix = {kBosId};
      while (static_cast<int64_t>(prefix.size()) <= c.max_seq_len) {
        const std::vector<float> last =
            narrow(model.decode(memory, {lengths[b]}, prefix, static_cast<int64_t>(prefix.size())), 1,
                   static_cast<int64_t>(prefix.size()) - 1, 1)
                .to_vector();
        const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
        if (next == kEosId) break;
        prefix.push_back(next);
        if (static_cast<int64_t>(prefix.size()) - 1 == c.max_seq_len) break;
      }
      reference[b].assign(prefix.begin() + 1, prefix.end());
    }
  }
  TranslateOptions greedy;
  const auto cached = model.translate(src, lengths, B, S, greedy);
  CHECK(cached == reference);
  greedy.use_cache = false;
  CHECK(model.translate(src, lengths, B, S, greedy) == reference);
  // Not a degenerate model: the sources get different translations.
  CHECK(std::set<std::vector<int32_t>>(reference.begin(), reference.end()).size() > 1);

  for (float alpha : {0.0f, 0.7f}) {
    TranslateOptions beam;
    beam.beam = 3;
    beam.alpha = alpha;
    const auto with_cache = model.translate(src, lengths, B, S, beam);
    beam.use_cache = false;
    CHECK(model.translate(src, lengths, B, S, beam) == with_cache);
    // Batched over sources == one source at a time.
    beam.use_cache = true;
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int32_t> one(src.begin() + b * S, src.begin() + (b + 1) * S);
      CHECK(model.translate(one, {lengths[b]}, 1, S, beam)[0] == with_cache[b]);
    }
  }
  TranslateOptions limited;
  limited.max_len = 2;
  for (const auto& t : model.translate(src, lengths, B, S, limited)) CHECK(t.size() <= 2);
}

TEST_CASE("seq2seq: beam search finds a better sequence than greedy when one exists", "[seq2seq]") {
  // Over many random sources the beam's best sum of log-probabilities is never below greedy's.
  ModelConfig c = tiny_config_encoder_decoder("post", 1, 1);
  c.max_seq_len = 6;
  Seq2SeqModel model(c, 21);
  spread_parameters(model, 22, 0.6f);
  Rng rng(23);
  const int64_t B = 8, S = 4;
  const std::vector<int32_t> src = random_ids(B * S, 4, 11, rng);
  const std::vector<int64_t> lengths(B, S);
  TranslateOptions beam;
  beam.beam = 4;
  const auto greedy = model.translate(src, lengths, B, S);
  const auto beamed = model.translate(src, lengths, B, S, beam);
  NoGradGuard no_grad;
  const Tensor memory = model.encode(src, lengths, B, S);
  auto log_prob = [&](int64_t b, std::vector<int32_t> y) {
    // log P(y <eos> | x) by teacher forcing, counting <eos> unless y fills max_seq_len.
    std::vector<int32_t> in = {kBosId};
    in.insert(in.end(), y.begin(), y.end());
    if (static_cast<int64_t>(y.size()) < c.max_seq_len)
      y.push_back(kEosId);
    else
      in.pop_back();
    const int64_t T = static_cast<int64_t>(in.size());
    const Tensor lp = log_softmax(model.decode(narrow(memory, 0, b, 1), {S}, in, T));  // (1, T, V)
    double s = 0;
    for (int64_t t = 0; t < T; ++t) s += lp.at({0, t, y[t]});
    return s;
  };
  int better = 0;
  for (int64_t b = 0; b < B; ++b) {
    const double g = log_prob(b, greedy[b]), k = log_prob(b, beamed[b]);
    CHECK(k >= g - 1e-5);
    better += k > g + 1e-5;
  }
  CHECK(better > 0);
}

TEST_CASE("seq2seq: dropout only in training mode, translate evaluates", "[seq2seq]") {
  ModelConfig c = tiny_config_encoder_decoder("pre", 1, 1);
  c.dropout = 0.2f;
  c.attention_dropout = 0.1f;
  Seq2SeqModel model(c, 31);
  const std::vector<int32_t> src = {4, 5, 6, 2}, tgt = {1, 7, 8};
  const Tensor eval1 = model.forward(src, {4}, 1, 4, tgt, 3);
  CHECK(max_abs_diff(model.forward(src, {4}, 1, 4, tgt, 3), eval1) == 0.0);
  model.set_training(true);
  const Tensor train1 = model.forward(src, {4}, 1, 4, tgt, 3), train2 = model.forward(src, {4}, 1, 4, tgt, 3);
  CHECK(max_abs_diff(train1, train2) > 1e-4);
  const auto t1 = model.translate(src, {4}, 1, 4);
  CHECK(model.training());  // restored
  model.set_training(false);
  CHECK(model.translate(src, {4}, 1, 4) == t1);
}

TEST_CASE("seq2seq: parameter names, breakdown and FLOPs", "[seq2seq]") {
  ModelConfig c = tiny_config_encoder_decoder("pre", 1, 1);
  c.tie_embeddings = false;
  c.positional_encoding = PositionalEncoding::Learned;
  Seq2SeqModel model(c, 1);
  std::vector<std::string> names;
  for (const NamedParameter& p : model.parameters()) names.push_back(p.name);
  const std::vector<std::string> expected = {"src_emb.weight",
                                             "src_pos.weight",
                                             "encoder.blocks.0.ln1.weight",
                                             "encoder.blocks.0.ln1.bias",
                                             "encoder.blocks.0.ln2.weight",
                                             "encoder.blocks.0.ln2.bias",
                                             "encoder.blocks.0.attn.wq.weight",
                                             "encoder.blocks.0.attn.wq.bias",
                                             "encoder.blocks.0.attn.wk.weight",
                                             "encoder.blocks.0.attn.wk.bias",
                                             "encoder.blocks.0.attn.wv.weight",
                                             "encoder.blocks.0.attn.wv.bias",
                                             "encoder.blocks.0.attn.wo.weight",
                                             "encoder.blocks.0.attn.wo.bias",
                                             "encoder.blocks.0.fc1.weight",
                                             "encoder.blocks.0.fc1.bias",
                                             "encoder.blocks.0.fc2.weight",
                                             "encoder.blocks.0.fc2.bias",
                                             "encoder.ln_f.weight",
                                             "encoder.ln_f.bias",
                                             "tgt_emb.weight",
                                             "tgt_pos.weight",
                                             "decoder.blocks.0.ln1.weight",
                                             "decoder.blocks.0.ln1.bias",
                                             "decoder.blocks.0.attn.wq.weight",
                                             "decoder.blocks.0.attn.wq.bias",
                                             "decoder.blocks.0.attn.wk.weight",
                                             "decoder.blocks.0.attn.wk.bias",
                                             "decoder.blocks.0.attn.wv.weight",
                                             "decoder.blocks.0.attn.wv.bias",
                                             "decoder.blocks.0.attn.wo.weight",
                                             "decoder.blocks.0.attn.wo.bias",
                                             "decoder.blocks.0.ln2.weight",
                                             "decoder.blocks.0.ln2.bias",
                                             "decoder.blocks.0.cross.wq.weight",
                                             "decoder.blocks.0.cross.wq.bias",
                                             "decoder.blocks.0.cross.wk.weight",
                                             "decoder.blocks.0.cross.wk.bias",
                                             "decoder.blocks.0.cross.wv.weight",
                                             "decoder.blocks.0.cross.wv.bias",
                                             "decoder.blocks.0.cross.wo.weight",
                                             "decoder.blocks.0.cross.wo.bias",
                                             "decoder.blocks.0.ln3.weight",
                                             "decoder.blocks.0.ln3.bias",
                                             "decoder.blocks.0.fc1.weight",
                                             "decoder.blocks.0.fc1.bias",
                                             "decoder.blocks.0.fc2.weight",
                                             "decoder.blocks.0.fc2.bias",
                                             "decoder.ln_f.weight",
                                             "decoder.ln_f.bias",
                                             "head.weight"};
  CHECK(names == expected);
  const int64_t C = 16, F = 32, L = 12;
  const int64_t attn = 4 * (C * C + C), ffn = 2 * C * F + F + C;
  std::map<std::string, int64_t> parts;
  for (const auto& [k, n] : model.parameter_breakdown()) parts[k] = n;
  CHECK(parts["embedding"] == (11 + 13) * C);
  CHECK(parts["positions"] == 2 * L * C);
  CHECK(parts["attention"] == 3 * attn);
  CHECK(parts["feed-forward"] == 2 * ffn);
  CHECK(parts["norms"] == 7 * 2 * C);
  CHECK(parts["head"] == 13 * C);
  CHECK(model.parameter_count() == (11 + 13) * C + 2 * L * C + 3 * attn + 2 * ffn + 14 * C + 13 * C);
  // Residual projections (wo, cross.wo, fc2) start at 0.02 / sqrt(2 * 2 layers), the rest at 0.02.
  auto std_of = [&](const std::string& name) {
    const auto v = model.find_parameter(name)->value.to_vector();
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s / static_cast<double>(v.size()));
  };
  CHECK(std_of("decoder.blocks.0.cross.wo.weight") == Approx(0.01).epsilon(0.15));
  CHECK(std_of("decoder.blocks.0.cross.wq.weight") == Approx(0.02).epsilon(0.15));

  // FLOPs: the encoder's share equals the LM's per-token count for its layers, scaled by S / T.
  ModelConfig lm = c;
  lm.n_layers = 1;
  lm.vocab_size = 1;
  const int64_t S = 6, T = 4;
  ModelConfig enc_only = c, none = c;
  enc_only.n_decoder_layers = 0;
  none.n_encoder_layers = none.n_decoder_layers = 0;
  const double encoder = Seq2SeqModel::flops_per_token(enc_only, S, T).forward_per_token -
                         Seq2SeqModel::flops_per_token(none, S, T).forward_per_token;
  lm.n_layers = 0;
  const double lm0 = LanguageModel::flops_per_token(lm, S).forward_per_token;
  lm.n_layers = 1;
  CHECK(encoder == Approx((LanguageModel::flops_per_token(lm, S).forward_per_token - lm0) * S / T));
  CHECK(Seq2SeqModel::flops_per_token(c, S, T).train_per_token ==
        Approx(3 * Seq2SeqModel::flops_per_token(c, S, T).forward_per_token));
}

// ---------------------------------------------------------------------------------------------
// Against PyTorch (scripts/dev/make_fixtures.py's Seq2Seq, same names and weights)

TEST_CASE("reference: encoder-decoder logits, loss and gradients match PyTorch", "[seq2seq][reference]") {
  using namespace tfm::testing;
  for (const char* name : {"seq2seq_pre_sinusoidal_tied", "seq2seq_post_learned_untied"}) {
    SECTION(name) {
      const json fx = load_fixture(name);
      Seq2SeqModel model(config_from(fx.at("config")), 1);
      load_parameters(model, fx.at("params"));
      const int64_t B = fx.at("B"), S = fx.at("S"), T = fx.at("T");
      model.flat_grads().fill_(0.0f);
      const Tensor logits = model.forward(fx.at("src").get<std::vector<int32_t>>(),
                                          fx.at("src_lengths").get<std::vector<int64_t>>(), B, S,
                                          fx.at("tgt_in").get<std::vector<int32_t>>(), T);  // (B, T, V)
      check_logits_loss_gradients(
          name, model, fx, logits,
          cross_entropy(logits, fx.at("tgt_out").get<std::vector<int32_t>>(), kPadId));
    }
  }
}
