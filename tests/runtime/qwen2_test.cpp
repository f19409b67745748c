// Qwen2 / Qwen2.5 support: the qwen2 and llama-bpe pre-tokenizers, the Qwen chat template, the qwen2 block
// (q/k/v biases, NEOX RoPE) on tiny models the test writes, and the real Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF
// against llama.cpp's own outputs on the same file (tests/fixtures/qwen2_5_coder_*.json, made by
// scripts/make_token_fixtures.py and scripts/make_llama_cpp_fixtures.py). The real-model tests skip when the
// model is not fetched (scripts/fetch_qwen_model.sh; ~1.1 GB, so CI does not fetch it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "minimakv/gguf_reader.h"
#include "minimakv/inference_session.h"
#include "minimakv/llama_model.h"
#include "minimakv/model_files.h"
#include "minimakv/sampler.h"
#include "minimakv/tokenizer.h"
#include "runtime/gguf_test_writer.h"
#include "runtime/runtime_test_fixtures.h"
#include "tools/json.h"

namespace minimakv {
namespace {

using testing::FixtureIds;
using testing::GgufTestWriter;
using testing::ReadJsonFixture;
using testing::TinyTokenizer;
using Words = std::vector<std::string>;

TEST(Qwen2Tokenizer, PreTokenizerSplits) {
  auto tok = TinyTokenizer("qwen2");
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizer::kQwen2);
  EXPECT_EQ(tok->PreTokenize("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(tok->PreTokenize("abc 123x"), (Words{"abc", " ", "1", "2", "3", "x"}));
  EXPECT_EQ(tok->PreTokenize("IT'S we'LL"), (Words{"IT", "'S", " we", "'LL"}));  // case-insensitive
  EXPECT_EQ(tok->PreTokenize("\tfoo (bar)"), (Words{"\tfoo", " (", "bar", ")"}));
  EXPECT_EQ(tok->PreTokenize("(bar"), (Words{"(bar"}));  // one non-letter, non-break code point joins a word
  EXPECT_EQ(tok->PreTokenize("x\n\ny"), (Words{"x", "\n\n", "y"}));
  EXPECT_EQ(tok->PreTokenize("a  \n  b"), (Words{"a", "  \n", " ", " b"}));
  EXPECT_EQ(tok->PreTokenize("};\n\n}"), (Words{"};\n\n", "}"}));
  EXPECT_EQ(tok->PreTokenize("a   "), (Words{"a", "   "}));
  EXPECT_EQ(tok->PreTokenize("\nfoo"), (Words{"\n", "foo"}));  // a line break never prefixes a word
  auto llama3 = TinyTokenizer("llama-bpe");
  EXPECT_EQ(llama3->pre_tokenizer(), PreTokenizer::kLlama3);
  EXPECT_EQ(llama3->PreTokenize("abc 12345x"), (Words{"abc", " ", "123", "45", "x"}));
}

TEST(Qwen2Tokenizer, Llama3UsesWholeWordTokensWithoutMerges) {
  // "abc" is a token but no merge path builds it from "a" "b" "c" when "ab c" is missing; llama-bpe (ignore_merges)
  // still emits it whole, qwen2 goes through the merges.
  GgufTestWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "llama-bpe");
  w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c", "ab", "abc"});
  w.AddStringArray("tokenizer.ggml.merges", {"a b"});
  const std::vector<uint8_t> bytes = w.Build();
  std::unique_ptr<GgufFile> f;
  ASSERT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).ok());
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::FromGguf(*f, &tok).ok());
  std::vector<int32_t> ids;
  tok->Encode("abc", false, &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{4}));
  auto qwen = TinyTokenizer("qwen2");
  ids.clear();
  qwen->Encode("abc", false, &ids);  // this vocabulary has the merge "ab c"
  EXPECT_EQ(ids, (std::vector<int32_t>{8}));
}

TEST(Qwen2Tokenizer, ChatTemplateDefaultSystemTurnWithEscapedBreaks) {
  // The shape of Qwen2.5's template: the default system turn is one literal with "\n" escapes, after a
  // tools branch that also opens a system turn.
  const std::string tmpl =
      "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- else %}{%- if messages[0]['role'] == 'system' %}"
      "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}"
      "{{- '<|im_start|>system\\nYou are Q.<|im_end|>\\n' }}{%- endif %}{%- endif %}";
  auto tok = TinyTokenizer("qwen2", tmpl);
  std::string text;
  ASSERT_TRUE(tok->ApplyChatTemplate({{"user", "hi"}}, true, &text).ok());
  EXPECT_EQ(text, "<|im_start|>system\nYou are Q.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

// ---- tiny models: the qwen2 block ----

constexpr int kLayers = 2, kEmbd = 256, kHeads = 4, kKvHeads = 2, kHeadDim = 64, kFfn = 192, kVocab = 29;

std::vector<float> RandomValues(std::mt19937* rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// Row r of a [heads * head_dim] projection in NEOX order, moved to where "normal" RoPE rotates the same pair:
// NEOX pairs (j, j + d/2) of a head become adjacent rows (2j, 2j + 1).
std::vector<float> NeoxToAdjacent(const std::vector<float>& rows, int heads, int row_len) {
  std::vector<float> out(rows.size());
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < kHeadDim / 2; ++j) {
      for (int side = 0; side < 2; ++side) {
        const int64_t from = int64_t(h) * kHeadDim + j + side * (kHeadDim / 2);
        const int64_t to = int64_t(h) * kHeadDim + 2 * j + side;
        std::copy_n(rows.begin() + from * row_len, row_len, out.begin() + to * row_len);
      }
    }
  }
  return out;
}

struct TinyOptions {
  std::string arch = "qwen2";
  bool permute_to_adjacent = false;  // write q/k (weights and biases) in "normal" RoPE order
  float bias_scale = 0.5f;           // 0: zero biases
  bool drop_k_bias = false;
  float layer0_k_bias_scale = 1.0f;  // layer 0's k bias times this (a key-bias outlier layer, as Qwen2.5's)
  float freq_base = 1000000.0f;   // Qwen2.5's base
  std::vector<float> rope_freqs;  // written as rope_freqs.weight when not empty (Llama 3.1+ frequency divisors)
};

std::string WriteTinyQwen(const TinyOptions& o) {
  const std::string path = minimakv::testing::UniqueTempPath("tiny_qwen2");
  std::mt19937 rng(11);
  GgufTestWriter w;
  const std::string k = o.arch + ".";
  w.AddString("general.architecture", o.arch);
  w.AddU32(k + "block_count", kLayers);
  w.AddU32(k + "embedding_length", kEmbd);
  w.AddU32(k + "feed_forward_length", kFfn);
  w.AddU32(k + "attention.head_count", kHeads);
  w.AddU32(k + "attention.head_count_kv", kKvHeads);
  w.AddU32(k + "context_length", 256);
  w.AddF32(k + "rope.freq_base", o.freq_base);
  w.AddF32(k + "attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<std::string> vocab = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (char ch = 'a'; ch <= 'z'; ++ch) vocab.push_back(std::string(1, ch));
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "qwen2");
  w.AddStringArray("tokenizer.ggml.tokens", vocab);
  w.AddStringArray("tokenizer.ggml.merges", {"a b"});
  w.AddF32Tensor("token_embd.weight", {kEmbd, kVocab}, RandomValues(&rng, size_t(kEmbd * kVocab), 1.0f));
  w.AddF32Tensor("output.weight", {kEmbd, kVocab}, RandomValues(&rng, size_t(kEmbd * kVocab), 0.1f));  // untied
  w.AddF32Tensor("output_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
  if (!o.rope_freqs.empty()) w.AddF32Tensor("rope_freqs.weight", {int64_t(o.rope_freqs.size())}, o.rope_freqs);
  const float ws = 1.0f / std::sqrt(float(kEmbd));
  const int q_dim = kHeads * kHeadDim, kv_dim = kKvHeads * kHeadDim;
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    std::vector<float> wq = RandomValues(&rng, size_t(kEmbd * q_dim), 4 * ws);
    std::vector<float> wk = RandomValues(&rng, size_t(kEmbd * kv_dim), ws);
    std::vector<float> bq = RandomValues(&rng, size_t(q_dim), 4 * o.bias_scale);
    std::vector<float> bk = RandomValues(&rng, size_t(kv_dim), o.bias_scale);
    if (l == 0) {
      for (float& b : bk) b *= o.layer0_k_bias_scale;
    }
    std::vector<float> bv = RandomValues(&rng, size_t(kv_dim), o.bias_scale);
    if (o.permute_to_adjacent) {
      wq = NeoxToAdjacent(wq, kHeads, kEmbd);
      wk = NeoxToAdjacent(wk, kKvHeads, kEmbd);
      bq = NeoxToAdjacent(bq, kHeads, 1);
      bk = NeoxToAdjacent(bk, kKvHeads, 1);
    }
    w.AddF32Tensor(p + "attn_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
    w.AddF32Tensor(p + "ffn_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
    w.AddF32Tensor(p + "attn_q.weight", {kEmbd, q_dim}, wq);
    w.AddF32Tensor(p + "attn_k.weight", {kEmbd, kv_dim}, wk);
    w.AddF32Tensor(p + "attn_v.weight", {kEmbd, kv_dim}, RandomValues(&rng, size_t(kEmbd * kv_dim), ws));
    w.AddF32Tensor(p + "attn_q.bias", {q_dim}, bq);
    if (!o.drop_k_bias) w.AddF32Tensor(p + "attn_k.bias", {kv_dim}, bk);
    w.AddF32Tensor(p + "attn_v.bias", {kv_dim}, bv);
    w.AddF32Tensor(p + "attn_output.weight", {q_dim, kEmbd}, RandomValues(&rng, size_t(kEmbd * q_dim), ws));
    w.AddF32Tensor(p + "ffn_gate.weight", {kEmbd, kFfn}, RandomValues(&rng, size_t(kEmbd * kFfn), ws));
    w.AddF32Tensor(p + "ffn_up.weight", {kEmbd, kFfn}, RandomValues(&rng, size_t(kEmbd * kFfn), ws));
    w.AddF32Tensor(p + "ffn_down.weight", {kFfn, kEmbd}, RandomValues(&rng, size_t(kEmbd * kFfn), ws));
  }
  EXPECT_TRUE(w.WriteFile(path));
  return path;
}

Status LoadTiny(const TinyOptions& o, std::unique_ptr<LlamaModel>* model) {
  const std::string path = WriteTinyQwen(o);
  const Status s = LlamaModel::Load(path, model);
  std::remove(path.c_str());  // the mapping stays valid after unlink
  return s;
}

std::vector<float> PrefillLogits(const LlamaModel& model, KvMode mode, const std::vector<int32_t>& ids) {
  SessionOptions so;
  so.mode = mode;
  so.max_tokens = 128;
  so.page_tokens = 16;
  std::unique_ptr<InferenceSession> s;
  EXPECT_TRUE(InferenceSession::Create(&model, so, &s).ok());
  std::vector<float> logits;
  EXPECT_TRUE(s->Forward(ids, true, &logits).ok());
  return logits;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

const std::vector<int32_t> kPrompt = {3, 7, 11, 20, 4, 4, 28, 9, 15, 3, 22, 17, 5, 8, 26, 12, 19, 6, 10, 25};

TEST(Qwen2Model, LoadsQwen2Config) {
  std::unique_ptr<LlamaModel> m;
  ASSERT_TRUE(LoadTiny({}, &m).ok());
  const LlamaConfig& c = m->config();
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_TRUE(c.rope_neox);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.head_dim, kHeadDim);
  EXPECT_EQ(c.rope_freq_base, 1000000.0f);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
}

TEST(Qwen2Model, MissingBiasAndUnknownArchitectureAreErrors) {
  std::unique_ptr<LlamaModel> m;
  TinyOptions o;
  o.drop_k_bias = true;
  const Status s = LoadTiny(o, &m);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("attn_k.bias"), std::string::npos) << s.ToString();
  o = TinyOptions();
  o.arch = "gemma";
  EXPECT_EQ(LoadTiny(o, &m).code(), StatusCode::kUnsupported);
}

// Key-bias outlier layers (llama_model.h): the largest |attn_k.bias| per layer, and the rule that keeps a layer FP8.
TEST(Qwen2Model, KeyBiasOutlierLayersFindAScaledLayer) {
  std::unique_ptr<LlamaModel> m;
  TinyOptions o;
  ASSERT_TRUE(LoadTiny(o, &m).ok());
  std::vector<float> plain = m->MaxAbsKeyBias();
  ASSERT_EQ(plain.size(), size_t(kLayers));
  for (float b : plain) EXPECT_GT(b, 0.0f);
  EXPECT_TRUE(KeyBiasOutlierLayers(plain).empty());  // random biases of one scale: no outlier
  o.layer0_k_bias_scale = 400.0f;
  ASSERT_TRUE(LoadTiny(o, &m).ok());
  const std::vector<float> scaled = m->MaxAbsKeyBias();
  EXPECT_FLOAT_EQ(scaled[0], 400.0f * plain[0]);
  EXPECT_EQ(KeyBiasOutlierLayers(scaled), (std::vector<int>{0}));
}

// Sessions store the outlier layer in BF16 (SessionOptions::auto_hot_layers) in every compressed mode, and only it;
// auto_hot_layers = false leaves it in the mode's format; explicit bf16_layers add to it.
TEST(Qwen2Model, SessionsStoreKeyBiasOutlierLayersInBf16) {
  std::unique_ptr<LlamaModel> m;
  TinyOptions o;
  o.layer0_k_bias_scale = 400.0f;
  ASSERT_TRUE(LoadTiny(o, &m).ok());
  const int64_t tokens = int64_t(kPrompt.size());
  for (KvMode mode : {KvMode::kFp8, KvMode::kTq3, KvMode::kMinima}) {
    for (int variant = 0; variant < 3; ++variant) {
      SessionOptions so;
      so.mode = mode;
      so.max_tokens = 128;
      so.page_tokens = 4;
      so.anchor_tokens = 4;
      so.recent_tokens = 8;
      so.auto_hot_layers = variant != 1;
      if (variant == 2) so.bf16_layers = {kLayers - 1};
      std::unique_ptr<InferenceSession> s;
      ASSERT_TRUE(InferenceSession::Create(m.get(), so, &s).ok());
      std::vector<float> logits;
      ASSERT_TRUE(s->Forward(kPrompt, false, &logits).ok());
      const KvAccounting acc = s->Accounting();
      const int64_t bf16_layers = variant == 0 ? 1 : variant == 1 ? 0 : 2;
      EXPECT_EQ(acc.formats[int(KvFormat::kBf16)].token_layers, bf16_layers * tokens)
          << KvModeName(mode) << " variant " << variant;
      EXPECT_EQ(acc.formats[int(KvFormat::kFp8)].token_layers + acc.formats[int(KvFormat::kTq3)].token_layers,
                (kLayers - bf16_layers) * tokens)
          << KvModeName(mode) << " variant " << variant;
    }
  }
  SessionOptions bad;
  bad.mode = KvMode::kMinima;
  bad.max_tokens = 64;
  bad.bf16_layers = {kLayers};
  std::unique_ptr<InferenceSession> s;
  const Status status = InferenceSession::Create(m.get(), bad, &s);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("bf16_layers entry " + std::to_string(kLayers)), std::string::npos)
      << status.ToString();
}

TEST(KeyBiasOutlierLayers, TheRule) {
  // Qwen2.5-Coder-1.5B's largest |attn_k.bias| per layer (LlamaModel::MaxAbsKeyBias, rounded; BENCHMARKS section 5).
  const std::vector<float> qwen = {354.0f, 111.0f, 13.2f, 5.4f, 4.8f, 4.3f, 3.3f, 43.0f, 4.2f, 5.6f,
                                   6.6f,   5.7f,   3.4f,  11.5f, 4.3f, 45.8f, 4.5f, 5.2f, 8.0f, 5.9f,
                                   4.8f,   5.0f,   5.4f,  4.8f, 4.7f, 5.8f,  3.4f, 4.3f};
  EXPECT_EQ(KeyBiasOutlierLayers(qwen), (std::vector<int>{0, 1, 7, 15}));
  EXPECT_TRUE(KeyBiasOutlierLayers({}).empty());
  EXPECT_TRUE(KeyBiasOutlierLayers(std::vector<float>(12, 0.0f)).empty());        // no biases
  EXPECT_TRUE(KeyBiasOutlierLayers(std::vector<float>(12, 500.0f)).empty());      // large but alike
  EXPECT_TRUE(KeyBiasOutlierLayers(std::vector<float>{0.1f, 0.1f, 20.0f}).empty());  // outlier, but small
  EXPECT_EQ(KeyBiasOutlierLayers(std::vector<float>{0.1f, 0.1f, 40.0f}), (std::vector<int>{2}));
}

// NEOX RoPE on (x[j], x[j + d/2]) is "normal" RoPE on adjacent pairs after moving row j + d/2 next to row j, and
// attention scores do not change when q and k are permuted alike. So a qwen2 model must give the logits of a
// llama model (biases allowed, as llama.cpp allows them) whose q/k rows and biases are permuted that way.
// Only the order of the q.k sums differs. A swapped pair convention or a bias added after RoPE breaks it.
TEST(Qwen2Model, NeoxRopeEqualsAdjacentRopeOnPermutedRows) {
  std::unique_ptr<LlamaModel> qwen, llama;
  ASSERT_TRUE(LoadTiny({}, &qwen).ok());
  TinyOptions o;
  o.arch = "llama";
  o.permute_to_adjacent = true;
  ASSERT_TRUE(LoadTiny(o, &llama).ok());
  EXPECT_FALSE(llama->config().rope_neox);
  EXPECT_TRUE(llama->config().qkv_bias);
  const std::vector<float> a = PrefillLogits(*qwen, KvMode::kDense, kPrompt);
  const std::vector<float> b = PrefillLogits(*llama, KvMode::kDense, kPrompt);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LT(MaxAbsDiff(a, b), 1e-4);
  // Controls: the unpermuted weights under "normal" RoPE, and zero biases, move the logits far more.
  o.permute_to_adjacent = false;
  std::unique_ptr<LlamaModel> unpermuted, no_bias;
  ASSERT_TRUE(LoadTiny(o, &unpermuted).ok());
  EXPECT_GT(MaxAbsDiff(a, PrefillLogits(*unpermuted, KvMode::kDense, kPrompt)), 1e-2);
  TinyOptions zero;
  zero.bias_scale = 0.0f;
  ASSERT_TRUE(LoadTiny(zero, &no_bias).ok());
  EXPECT_GT(MaxAbsDiff(a, PrefillLogits(*no_bias, KvMode::kDense, kPrompt)), 1e-2);
}

// rope_freqs.weight divides pair i's angle by factor_i. With base b1 and factor_i = (b2 / b1)^(2i / d) the angle
// is pos * b1^(-2i/d) / factor_i = pos * b2^(-2i/d): the model must give the logits of base b2 with no factors (up
// to fp32 rounding of the angles). Ignoring the factors leaves base b1 and moves the logits far more.
TEST(Qwen2Model, RopeFreqFactorsDivideTheAngles) {
  constexpr float kBaseWithFactors = 10000.0f, kBaseEquivalent = 1000000.0f;
  TinyOptions o;
  o.freq_base = kBaseWithFactors;
  for (int i = 0; i < kHeadDim / 2; ++i) {
    o.rope_freqs.push_back(float(std::pow(double(kBaseEquivalent) / kBaseWithFactors, 2.0 * i / kHeadDim)));
  }
  std::unique_ptr<LlamaModel> with_factors, equivalent, base_only;
  ASSERT_TRUE(LoadTiny(o, &with_factors).ok());
  EXPECT_EQ(with_factors->config().rope_freq_factors, o.rope_freqs);
  TinyOptions plain;
  plain.freq_base = kBaseEquivalent;
  ASSERT_TRUE(LoadTiny(plain, &equivalent).ok());
  plain.freq_base = kBaseWithFactors;
  ASSERT_TRUE(LoadTiny(plain, &base_only).ok());
  const std::vector<float> a = PrefillLogits(*with_factors, KvMode::kDense, kPrompt);
  EXPECT_LT(MaxAbsDiff(a, PrefillLogits(*equivalent, KvMode::kDense, kPrompt)), 1e-3);
  EXPECT_GT(MaxAbsDiff(a, PrefillLogits(*base_only, KvMode::kDense, kPrompt)), 1e-2);
}

TEST(Qwen2Model, BadRopeFreqFactorsAreErrorsNamingTheTensor) {
  std::unique_ptr<LlamaModel> m;
  TinyOptions o;
  o.rope_freqs.assign(kHeadDim / 2 - 1, 1.0f);  // one short
  Status s = LoadTiny(o, &m);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("rope_freqs.weight"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(kHeadDim / 2 - 1)), std::string::npos) << s.ToString();
  o.rope_freqs.assign(kHeadDim / 2, 1.0f);
  o.rope_freqs[5] = 0.0f;  // a zero divisor
  s = LoadTiny(o, &m);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("entry 5"), std::string::npos) << s.ToString();
}

TEST(Qwen2Model, DecodeThroughBf16CacheTracksDensePrefill) {
  std::unique_ptr<LlamaModel> m;
  ASSERT_TRUE(LoadTiny({}, &m).ok());
  const std::vector<float> dense = PrefillLogits(*m, KvMode::kDense, kPrompt);
  SessionOptions so;
  so.mode = KvMode::kBf16;
  so.max_tokens = 128;
  so.page_tokens = 16;
  std::unique_ptr<InferenceSession> s;
  ASSERT_TRUE(InferenceSession::Create(m.get(), so, &s).ok());
  std::vector<float> logits;
  ASSERT_TRUE(s->Forward({kPrompt.data(), 8}, false, &logits).ok());
  double max_diff = 0, max_abs = 0;
  for (size_t t = 8; t < kPrompt.size(); ++t) {  // one token at a time through the bf16 pages
    ASSERT_TRUE(s->Forward({kPrompt.data() + t, 1}, false, &logits).ok());
    for (int v = 0; v < kVocab; ++v) {
      max_diff = std::max(max_diff, double(std::fabs(logits[size_t(v)] - dense[t * kVocab + size_t(v)])));
      max_abs = std::max(max_abs, double(std::fabs(dense[t * kVocab + size_t(v)])));
    }
  }
  EXPECT_LT(max_diff, 0.02 * max_abs);  // bf16 K/V: 8 mantissa bits
}

// ---- the real Qwen2.5-Coder-1.5B-Instruct Q4_K_M against llama.cpp ----

TEST(Qwen25Coder, TokenizerMatchesLlamaCppIds) {
  std::unique_ptr<GgufFile> file;
  if (!GgufFile::Open(QwenModelPath(), &file).ok()) GTEST_SKIP() << "Qwen model not fetched: " << QwenModelPath();
  std::unique_ptr<Tokenizer> tok;
  ASSERT_TRUE(Tokenizer::FromGguf(*file, &tok).ok());
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizer::kQwen2);
  JsonValue root;
  ASSERT_TRUE(ReadJsonFixture("qwen2_5_coder_tokens.json", &root));
  const JsonValue* cases = root.Find("cases");
  ASSERT_NE(cases, nullptr);
  ASSERT_GE(cases->size(), 18u);
  for (const JsonValue& c : cases->items()) {
    const std::string name = c.Find("name")->as_string();
    const std::string input = c.Find("text")->as_string();
    std::vector<int32_t> ids;
    tok->Encode(input, c.Find("parse_special")->as_bool(), &ids);
    EXPECT_EQ(ids, FixtureIds(c.Find("ids"))) << name;
    EXPECT_EQ(tok->DecodeAll(ids, true), input) << name;
  }
  std::string chat;
  ASSERT_TRUE(tok->ApplyChatTemplate({{"user", "hi"}}, true, &chat).ok());
  EXPECT_EQ(chat, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

// What agreement to expect: llama.cpp multiplies Q4_K/Q6_K weights by activations quantized to Q8_K (256-blocks);
// we re-quantize those weights to Q8_0 at load and quantize activations to Q8_0 (32-blocks), so the logits differ
// by quantization noise of the same size as llama.cpp's own. Top-1 can flip only where llama.cpp is nearly tied
// (measured: 249/256 in both modes below; apart from position 0, misses only where llama.cpp's margin <= 0.33).
// Position 0 is the exception: Qwen2.5 turns the first token into an attention sink with a few huge activations,
// and its own logits then depend on how each implementation quantizes those: llama.cpp's top logit there is 16.39
// (id 15), ours 9.77 (id 16) with Q8_0 weights and 8.00 (id 16) with exact fp32 weights, while position 1, which
// attends to it, agrees to 0.2 (16.28 vs 16.50). So position 0 counts toward agreement but not the margin check.
constexpr double kQwenMinTop1Agreement = 0.96;
constexpr double kQwenMaxMissMargin = 0.5;
constexpr size_t kQwenSinkPosition = 0;
constexpr size_t kQwenMinGreedyPrefix = 12;  // measured: 32/32 and 16/32 tokens equal

class Qwen25CoderVsLlamaCpp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!LlamaModel::Load(QwenModelPath(), &model_).ok()) model_.reset();
    ASSERT_TRUE(ReadJsonFixture("qwen2_5_coder_llama_cpp.json", &fixture_));
  }
  static void TearDownTestSuite() { model_.reset(); }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "Qwen model not fetched: " << QwenModelPath();
  }
  static std::unique_ptr<InferenceSession> Session(KvMode mode, int max_tokens) {
    SessionOptions o;
    o.mode = mode;
    o.max_tokens = max_tokens;
    o.emulate_llama_cpp_f16 = mode == KvMode::kDense;
    std::unique_ptr<InferenceSession> s;
    EXPECT_TRUE(InferenceSession::Create(model_.get(), o, &s).ok());
    return s;
  }
  void Top1(KvMode mode, int chunk) {
    const std::vector<int32_t> ids = FixtureIds(fixture_.Find("text_ids"));
    const std::vector<int32_t> top1 = FixtureIds(fixture_.Find("top1"));
    std::vector<double> margin;
    for (const JsonValue& m : fixture_.Find("top1_margin")->items()) margin.push_back(m.as_double());
    ASSERT_GE(ids.size(), 200u);
    ASSERT_EQ(top1.size(), ids.size());
    std::unique_ptr<InferenceSession> s = Session(mode, int(ids.size()));
    const size_t vocab = size_t(model_->config().vocab_size);
    int agree = 0;
    double max_miss_margin = 0;  // over the misses outside the sink position
    for (size_t c0 = 0; c0 < ids.size(); c0 += size_t(chunk)) {
      const size_t n = std::min(size_t(chunk), ids.size() - c0);
      std::vector<float> logits;
      ASSERT_TRUE(s->Forward({ids.data() + c0, n}, true, &logits).ok());
      for (size_t i = 0; i < n; ++i) {
        const int32_t ours = ArgMax({logits.data() + i * vocab, vocab});
        if (ours == top1[c0 + i]) {
          ++agree;
        } else if (c0 + i != kQwenSinkPosition) {
          max_miss_margin = std::max(max_miss_margin, margin[c0 + i]);
          EXPECT_LT(margin[c0 + i], kQwenMaxMissMargin) << "position " << c0 + i << ": ours " << ours
                                                        << ", llama.cpp " << top1[c0 + i];
        }
      }
    }
    EXPECT_GE(double(agree) / double(ids.size()), kQwenMinTop1Agreement) << agree << "/" << ids.size();
    std::printf("[ qwen2.5 ] %s top-1 agreement with llama.cpp: %d/%zu, largest llama.cpp margin at a miss %.3f\n",
                std::string(KvModeName(mode)).c_str(), agree, ids.size(), max_miss_margin);
  }
  static std::unique_ptr<LlamaModel> model_;
  static JsonValue fixture_;
};
std::unique_ptr<LlamaModel> Qwen25CoderVsLlamaCpp::model_;
JsonValue Qwen25CoderVsLlamaCpp::fixture_;

TEST_F(Qwen25CoderVsLlamaCpp, Top1DenseF16Emulation) { Top1(KvMode::kDense, 1 << 20); }
TEST_F(Qwen25CoderVsLlamaCpp, Top1Bf16CacheInChunks) { Top1(KvMode::kBf16, 64); }

TEST_F(Qwen25CoderVsLlamaCpp, GreedyContinuation) {
  const JsonValue* greedy = fixture_.Find("greedy");
  ASSERT_NE(greedy, nullptr);
  ASSERT_GE(greedy->size(), 1u);
  for (const JsonValue& g : greedy->items()) {
    const std::vector<int32_t> prompt = FixtureIds(g.Find("prompt_ids"));
    const std::vector<int32_t> expected = FixtureIds(g.Find("ids"));
    // Our own tokenizer and chat template give llama.cpp's prompt ids.
    std::string chat;
    ASSERT_TRUE(model_->tokenizer().ApplyChatTemplate({{"user", g.Find("prompt")->as_string()}}, true, &chat).ok());
    std::vector<int32_t> ours_prompt;
    model_->tokenizer().Encode(chat, true, &ours_prompt);
    EXPECT_EQ(ours_prompt, prompt);
    std::unique_ptr<InferenceSession> s = Session(KvMode::kBf16, int(prompt.size() + expected.size()));
    std::vector<float> logits;
    ASSERT_TRUE(s->Forward(prompt, false, &logits).ok());
    std::vector<int32_t> out;
    for (size_t i = 0; i < expected.size(); ++i) {
      out.push_back(ArgMax(logits));
      ASSERT_TRUE(s->Forward({&out.back(), 1}, false, &logits).ok());
    }
    size_t same = 0;
    while (same < out.size() && out[same] == expected[same]) ++same;
    std::printf("[ qwen2.5 ] greedy '%s': first %zu/%zu tokens equal llama.cpp's\n",
                g.Find("prompt")->as_string().c_str(), same, expected.size());
    EXPECT_GE(same, std::min(kQwenMinGreedyPrefix, expected.size())) << model_->tokenizer().DecodeAll(out);
  }
}

}  // namespace
}  // namespace minimakv
