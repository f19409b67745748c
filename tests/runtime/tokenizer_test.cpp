#include "minimakv/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>


#include "minimakv/gguf_reader.h"
#include "minimakv/model_files.h"
#include "minimakv/passkey_task.h"
#include "runtime/gguf_test_writer.h"
#include "runtime/runtime_test_fixtures.h"
#include "tools/json.h"

namespace minimakv {
namespace {

using testing::GgufTestWriter;

// The tiny vocabulary with <|im_start|> as BOS and a ChatML template that inserts a system turn.
std::unique_ptr<Tokenizer> TinyTokenizer(const std::string& pre) {
  const std::string chat_template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\nBe brief.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + "
      "'\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
  return testing::TinyTokenizer(pre, chat_template, /*bos_token_id=*/1);
}

TEST(Tokenizer, PreTokenizerSplits) {
  auto tok = TinyTokenizer("smollm");
  using V = std::vector<std::string>;
  EXPECT_EQ(tok->PreTokenize("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(tok->PreTokenize("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(tok->PreTokenize("abc 123x"), (V{"abc", " ", "1", "2", "3", "x"}));
  EXPECT_EQ(tok->PreTokenize("it's we'll"), (V{"it", "'s", " we", "'ll"}));
  EXPECT_EQ(tok->PreTokenize("x\n\ny"), (V{"x", "\n", "\n", "y"}));
  EXPECT_EQ(tok->PreTokenize("a   "), (V{"a", "   "}));
  EXPECT_EQ(tok->PreTokenize("f(x)!= 2"), (V{"f", "(", "x", ")!=", " ", "2"}));
  EXPECT_EQ(tok->PreTokenize("caf\xC3\xA9 \xE6\x9D\xB1"), (V{"caf\xC3\xA9", " \xE6\x9D\xB1"}));
  auto gpt2 = TinyTokenizer("gpt2");
  EXPECT_EQ(gpt2->PreTokenize("abc 123x"), (V{"abc", " 123", "x"}));
}

TEST(Tokenizer, BpeMergesByRankAndSpecialTokens) {
  auto tok = TinyTokenizer("smollm");
  std::vector<int32_t> ids;
  tok->Encode("abc ab", false, &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{8, 9}));
  ids.clear();
  tok->Encode("cab", false, &ids);  // c + ab
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 7}));
  ids.clear();
  tok->Encode("<|im_start|>ab<|im_end|>", true, &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 7, 2}));
  ids.clear();
  tok->Encode("<|im_end|>", false, &ids);  // control tokens are plain text without parse_special
  EXPECT_NE(ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(tok->DecodeAll({8, 9, 11}), "abc ab\n");
  EXPECT_EQ(tok->Decode(2), "");
  EXPECT_EQ(tok->Decode(2, true), "<|im_end|>");
  EXPECT_TRUE(tok->IsEndOfGeneration(2));
  EXPECT_FALSE(tok->IsEndOfGeneration(7));
}

TEST(Tokenizer, ChatTemplateInsertsDefaultSystemTurn) {
  auto tok = TinyTokenizer("smollm");
  std::string text;
  ASSERT_TRUE(tok->ApplyChatTemplate({{"user", "hi"}}, true, &text).ok());
  EXPECT_EQ(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_TRUE(tok->ApplyChatTemplate({{"system", "S"}, {"user", "hi"}}, false, &text).ok());
  EXPECT_EQ(text, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
}

TEST(Tokenizer, RejectsUnsupportedModels) {
  GgufTestWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  const std::vector<uint8_t> bytes = w.Build();
  std::unique_ptr<GgufFile> f;
  ASSERT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).ok());
  std::unique_ptr<Tokenizer> tok;
  EXPECT_EQ(Tokenizer::FromGguf(*f, &tok).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace minimakv

// ---- the real SmolLM2 tokenizer against ids llama.cpp produced (tests/fixtures/smollm2_tokens.json, made by
// scripts/make_token_fixtures.py). Skipped when the model is not fetched (scripts/fetch_model.sh). ----
namespace minimakv {
namespace {

// A passkey context beyond the limit is refused before its text is built (was: --context 2^40 in `minimakv run`
// or `eval niah` built filler text until the allocation failed, std::bad_alloc after tens of GB).
TEST(PasskeyTask, RefusesContextsPastTheLimitBeforeBuildingText) {
  auto tok = TinyTokenizer("smollm");
  PasskeyCase pc;
  for (int64_t context : {kMaxPasskeyContextTokens + 1, int64_t(1) << 40}) {
    const Status s = BuildPasskeyCase(*tok, context, 0.5, 1, &pc);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("context " + std::to_string(context)), std::string::npos) << s.message();
  }
  EXPECT_NE(BuildPasskeyCase(*tok, 4096, 1.5, 1, &pc).message().find("depth 1.5"), std::string::npos);
}

TEST(TokenizerSmolLM2, MatchesLlamaCppIds) {
  std::unique_ptr<GgufFile> file;
  if (!GgufFile::Open(DefaultModelPath(), &file).ok()) GTEST_SKIP() << "model not fetched: " << DefaultModelPath();
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::FromGguf(*file, &tok).ok());
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizer::kDigitsThenGpt2);
  JsonValue root;
  ASSERT_TRUE(testing::ReadJsonFixture("smollm2_tokens.json", &root)) << testing::FixturePath("smollm2_tokens.json");
  const JsonValue* cases = root.Find("cases");
  ASSERT_NE(cases, nullptr);
  ASSERT_GE(cases->size(), 10u);
  for (const JsonValue& c : cases->items()) {
    const std::string name = c.Find("name")->as_string();
    const std::string input = c.Find("text")->as_string();
    const std::vector<int32_t> expected = testing::FixtureIds(c.Find("ids"));
    std::vector<int32_t> ids;
    tok->Encode(input, c.Find("parse_special")->as_bool(), &ids);
    EXPECT_EQ(ids, expected) << name;
    // Byte-level BPE is lossless: decoding gives the text back (control tokens rendered).
    EXPECT_EQ(tok->DecodeAll(ids, true), input) << name;
  }
}

}  // namespace
}  // namespace minimakv
