// Helpers shared by the runtime tests: the committed JSON fixtures under tests/fixtures/ (made by the scripts in
// scripts/ from llama.cpp's outputs) and a tiny byte-level BPE vocabulary written as GGUF metadata.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "minimakv/gguf_reader.h"
#include "minimakv/tokenizer.h"
#include "runtime/gguf_test_writer.h"
#include "tools/json.h"

namespace minimakv::testing {

// tests/fixtures/<name>, found from this header's own path so tests run from any directory.
inline std::string FixturePath(const std::string& name) {
  const std::string here = __FILE__;  // .../tests/runtime/runtime_test_fixtures.h
  return here.substr(0, here.rfind("/runtime/")) + "/fixtures/" + name;
}

// Parses tests/fixtures/<name>; false when the file is missing or not valid JSON.
inline bool ReadJsonFixture(const std::string& name, JsonValue* root) {
  std::ifstream in(FixturePath(name));
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  return ParseJson(text.str(), root).ok();
}

// A JSON array of token ids (a test failure for any non-integer entry).
inline std::vector<int32_t> FixtureIds(const JsonValue* array) {
  std::vector<int32_t> out;
  if (array == nullptr) {
    ADD_FAILURE() << "fixture lacks an id array";
    return out;
  }
  for (const JsonValue& x : array->items()) {
    int64_t id = 0;
    EXPECT_TRUE(x.GetInt64(&id));
    out.push_back(int32_t(id));
  }
  return out;
}

// Control tokens 0..2 (<|endoftext|>, <|im_start|>, <|im_end|>), then a tiny byte-level vocabulary (Ġ, U+0120,
// is GPT-2's symbol for the space byte, Ċ for the line feed) with three merges.
inline void AddTinyVocab(GgufTestWriter* w, const std::string& pre, const std::string& chat_template,
                         int bos_token_id = -1) {
  w->AddString("tokenizer.ggml.model", "gpt2");
  w->AddString("tokenizer.ggml.pre", pre);
  w->AddStringArray("tokenizer.ggml.tokens", {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c",
                                              "\xC4\xA0", "ab", "abc", "\xC4\xA0" "ab", "1", "\xC4\x8A"});
  w->AddI32Array("tokenizer.ggml.token_type", {3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  w->AddStringArray("tokenizer.ggml.merges", {"a b", "ab c", "\xC4\xA0 ab"});
  if (bos_token_id >= 0) w->AddU32("tokenizer.ggml.bos_token_id", uint32_t(bos_token_id));
  w->AddU32("tokenizer.ggml.eos_token_id", 2);
  if (!chat_template.empty()) w->AddString("tokenizer.chat_template", chat_template);
}

// The tiny vocabulary loaded as a Tokenizer (test failures if it does not load).
inline std::unique_ptr<Tokenizer> TinyTokenizer(const std::string& pre, const std::string& chat_template = "",
                                                int bos_token_id = -1) {
  GgufTestWriter w;
  AddTinyVocab(&w, pre, chat_template, bos_token_id);
  const std::vector<uint8_t> bytes = w.Build();
  std::unique_ptr<GgufFile> f;
  EXPECT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).ok());
  std::unique_ptr<Tokenizer> tok;
  const Status s = Tokenizer::FromGguf(*f, &tok);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return tok;
}

}  // namespace minimakv::testing
