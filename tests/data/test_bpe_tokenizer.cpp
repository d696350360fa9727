// BPE through the tokenizer plumbing and the CLI: tfm tokenizer train -> data.tokenizer = "bpe" ->
// train 20 steps -> sample; checkpoints keep the merges; any byte string (Chinese, invalid UTF-8)
// round-trips through tfm::Tokenizer.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli_run.h"
#include "tfm/data/bpe.h"
#include "tfm/data/tokenizer.h"
#include "tfm/engine/error.h"
#include "tfm/engine/file_io.h"
#include "tfm/training/checkpoint.h"

namespace fs = std::filesystem;

TEST_CASE("bpe tokenizer: Chinese and arbitrary bytes round-trip through tfm::Tokenizer and its JSON",
          "[bpe][data]") {
  const std::string zh =
      "\xe5\xba\x8a\xe5\x89\x8d\xe6\x98\x8e\xe6\x9c\x88\xe5\x85\x89\xef\xbc\x8c"
      "\xe7\x96\x91\xe6\x98\xaf\xe5\x9c\xb0\xe4\xb8\x8a\xe9\x9c\x9c\xe3\x80\x82";  // 床前明月光，疑是地上霜。
  std::string text;
  for (int i = 0; i < 20; ++i) text += zh + " Hello, world! " + std::to_string(i) + "\n";
  const tfm::Tokenizer tok(tfm::BpeTokenizer::train(text, 300));
  CHECK(tok.kind() == tfm::Tokenizer::Kind::Bpe);
  CHECK(tok.kind_name() == "bpe");
  CHECK(tok.size() > 256);  // stops early when no pair occurs twice
  CHECK(tok.size() <= 300);
  const std::vector<int32_t> ids = tok.encode(zh, "zh");
  CHECK(ids.size() < zh.size());  // merges learned on the Chinese text apply
  CHECK(tok.decode(ids) == zh);
  const std::string odd =
      std::string("\xff\xfe\x00 caf\xc3\xa9 \xe5\xba", 12);  // invalid UTF-8, NUL, cut char
  CHECK(tok.decode(tok.encode(odd, "odd")) == odd);
  std::string pieces;  // token by token (as sample streams it) gives the same bytes
  for (int32_t id : ids) pieces += tok.decode(id);
  CHECK(pieces == zh);

  const tfm::Tokenizer back = tfm::Tokenizer::from_json(tok.to_json());
  CHECK(back.size() == tok.size());
  CHECK(back.encode(text, "text") == tok.encode(text, "text"));
  // A merge referring to a token that does not exist yet is refused.
  CHECK_THROWS_AS(tfm::Tokenizer::from_json({{"kind", "bpe"}, {"merges", {{1, 999}}}}), tfm::IoError);
}
