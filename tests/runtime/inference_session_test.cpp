// End-to-end tests of the CPU runtime on a tiny Llama GGUF the test writes itself (2 layers, 2 query heads and
// 1 KV head of dim 64, random weights): KV modes against the dense reference, chunked prefill, shared prefill,
// Q8 matmul kernels, errors.
#include "minimakv/inference_session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "minimakv/llama_model.h"
#include "minimakv/sampler.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/thread_pool.h"
#include "runtime/gguf_test_writer.h"
#include "runtime/quant_matmul.h"

namespace minimakv {
namespace {

using testing::GgufTestWriter;

constexpr int kLayers = 2, kEmbd = 384, kHeads = 6, kKvHeads = 2, kHeadDim = 64, kFfn = 256;  // GQA group 3 as SmolLM2

std::vector<std::string> Vocab() {
  std::vector<std::string> v = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (char ch = 'a'; ch <= 'z'; ++ch) v.push_back(std::string(1, ch));
  v.push_back("\xC4\xA0");  // space
  return v;
}

std::vector<float> RandomValues(std::mt19937* rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// Encodes fp32 rows as Q8_0 blocks (d = amax / 127, codes rounded), for the embedding table.
std::vector<uint8_t> EncodeQ8_0(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    const uint16_t h = FloatToFp16(d);
    out.push_back(uint8_t(h & 0xFF));
    out.push_back(uint8_t(h >> 8));
    for (int j = 0; j < 32; ++j) out.push_back(uint8_t(int8_t(std::lrint(d == 0 ? 0 : x[b * 32 + j] / d))));
  }
  return out;
}

std::string WriteTinyModel() {
  const std::string path = minimakv::testing::UniqueTempPath("tiny_llama");
  std::mt19937 rng(7);
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", "tiny");
  w.AddU32("llama.block_count", kLayers);
  w.AddU32("llama.embedding_length", kEmbd);
  w.AddU32("llama.feed_forward_length", kFfn);
  w.AddU32("llama.attention.head_count", kHeads);
  w.AddU32("llama.attention.head_count_kv", kKvHeads);
  w.AddU32("llama.context_length", 512);
  w.AddF32("llama.rope.freq_base", 10000.0f);
  w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  const std::vector<std::string> vocab = Vocab();
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "smollm");
  w.AddStringArray("tokenizer.ggml.tokens", vocab);
  std::vector<int32_t> types(vocab.size(), 1);
  types[0] = types[1] = types[2] = 3;
  w.AddI32Array("tokenizer.ggml.token_type", types);
  w.AddStringArray("tokenizer.ggml.merges", {"a b"});
  w.AddU32("tokenizer.ggml.eos_token_id", 2);
  const int64_t n_vocab = int64_t(vocab.size());
  w.AddTensor("token_embd.weight", {kEmbd, n_vocab}, 8, EncodeQ8_0(RandomValues(&rng, size_t(kEmbd * n_vocab), 1.0f)));
  w.AddF32Tensor("output_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
  const float ws = 1.0f / std::sqrt(float(kEmbd));
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.AddF32Tensor(p + "attn_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
    w.AddF32Tensor(p + "ffn_norm.weight", {kEmbd}, std::vector<float>(kEmbd, 1.0f));
    // Sharper attention than random weights would give: scale Q up so softmax is not uniform.
    w.AddF32Tensor(p + "attn_q.weight", {kEmbd, kHeads * kHeadDim}, RandomValues(&rng, size_t(kEmbd * kHeads * kHeadDim), 4 * ws));
    w.AddF32Tensor(p + "attn_k.weight", {kEmbd, kKvHeads * kHeadDim}, RandomValues(&rng, size_t(kEmbd * kKvHeads * kHeadDim), ws));
    w.AddF32Tensor(p + "attn_v.weight", {kEmbd, kKvHeads * kHeadDim}, RandomValues(&rng, size_t(kEmbd * kKvHeads * kHeadDim), ws));
    w.AddF32Tensor(p + "attn_output.weight", {kHeads * kHeadDim, kEmbd}, RandomValues(&rng, size_t(kEmbd * kHeads * kHeadDim), ws));
    w.AddF32Tensor(p + "ffn_gate.weight", {kEmbd, kFfn}, RandomValues(&rng, size_t(kEmbd * kFfn), ws));
    w.AddF32Tensor(p + "ffn_up.weight", {kEmbd, kFfn}, RandomValues(&rng, size_t(kEmbd * kFfn), ws));
    w.AddTensor(p + "ffn_down.weight", {kFfn, kEmbd}, 8, EncodeQ8_0(RandomValues(&rng, size_t(kEmbd * kFfn), ws)));
  }
  EXPECT_TRUE(w.WriteFile(path));
  return path;
}

class TinyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = WriteTinyModel();
    const Status s = LlamaModel::Load(path, &model_);
    std::remove(path.c_str());  // the mapping stays valid after unlink
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  static void TearDownTestSuite() { model_.reset(); }

  std::unique_ptr<InferenceSession> Session(KvMode mode, bool emulate = false, int page_tokens = 16) {
    SessionOptions o;
    o.mode = mode;
    o.max_tokens = 256;
    o.page_tokens = page_tokens;
    o.anchor_tokens = 16;
    o.recent_tokens = 32;
    o.emulate_llama_cpp_f16 = emulate;
    std::unique_ptr<InferenceSession> s;
    const Status st = InferenceSession::Create(model_.get(), o, &s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return s;
  }
  static std::vector<int32_t> Prompt(int n, int seed) {
    std::mt19937 rng{uint32_t(seed)};
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = 3 + int32_t(rng() % 27);
    return ids;
  }
  static std::unique_ptr<LlamaModel> model_;
};
std::unique_ptr<LlamaModel> TinyModel::model_;

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}
double MaxAbs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, double(std::fabs(x)));
  return m;
}

TEST_F(TinyModel, LoadsConfig) {
  const LlamaConfig& c = model_->config();
  EXPECT_EQ(c.num_layers, kLayers);
  EXPECT_EQ(c.head_dim, kHeadDim);
  EXPECT_EQ(c.num_kv_heads, kKvHeads);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.vocab_size, int(Vocab().size()));
}

// The first prefill chunk of every paged mode attends on fp32 K/V inside the chunk: bit-identical to dense.
TEST_F(TinyModel, PrefillLogitsIdenticalAcrossModes) {
  const std::vector<int32_t> prompt = Prompt(40, 1);
  std::vector<float> dense_logits;
  ASSERT_TRUE(Session(KvMode::kDense)->Forward(prompt, true, &dense_logits).ok());
  for (KvMode mode : kAllPagedKvModes) {
    std::vector<float> logits;
    ASSERT_TRUE(Session(mode)->Forward(prompt, true, &logits).ok());
    EXPECT_EQ(logits, dense_logits) << KvModeName(mode);
  }
}

// Decode steps read K/V from the paged cache: close to dense, error growing with the format's coarseness.
TEST_F(TinyModel, DecodeThroughCacheTracksDense) {
  const std::vector<int32_t> prompt = Prompt(100, 2);  // > anchor + recent: tq3 and minima convert pages
  const std::vector<int32_t> next = Prompt(12, 3);
  auto run = [&](KvMode mode) {
    auto s = Session(mode);
    std::vector<float> logits, all;
    EXPECT_TRUE(s->Forward(prompt, false, &logits).ok());
    for (int32_t t : next) {
      EXPECT_TRUE(s->Forward({&t, 1}, false, &logits).ok());
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return std::make_pair(all, s->Accounting());
  };
  const auto [dense, dense_acc] = run(KvMode::kDense);
  const double scale = MaxAbs(dense);
  const double tol[] = {0.01, 0.03, 0.2, 0.2};  // bf16, fp8, tq3, minima: max |logit diff| / max |logit| (measured 0.005, 0.017, 0.14, 0.14)
  int i = 0;
  for (KvMode mode : kAllPagedKvModes) {
    const auto [logits, acc] = run(mode);
    const double rel = MaxAbsDiff(logits, dense) / scale;
    EXPECT_LT(rel, tol[i]) << KvModeName(mode);
    EXPECT_GT(rel, 0.0) << KvModeName(mode) << ": decode must read the quantized cache";
    EXPECT_EQ(acc.stored_token_layers, int64_t(kLayers) * int64_t(prompt.size() + next.size()));
    if (mode == KvMode::kTq3 || mode == KvMode::kMinima) {
      EXPECT_GT(acc.stale_tq3_token_layers, 0) << KvModeName(mode);
    } else {
      EXPECT_EQ(acc.stale_tq3_token_layers, 0) << KvModeName(mode);
    }
    ++i;
  }
}

TEST_F(TinyModel, ChunkedPrefillMatchesSingleChunkInDenseMode) {
  const std::vector<int32_t> prompt = Prompt(48, 4);
  std::vector<float> whole, part1, part2;
  ASSERT_TRUE(Session(KvMode::kDense)->Forward(prompt, true, &whole).ok());
  auto s = Session(KvMode::kDense);
  ASSERT_TRUE(s->Forward(std::span(prompt).first(30), true, &part1).ok());
  ASSERT_TRUE(s->Forward(std::span(prompt).subspan(30), true, &part2).ok());
  part1.insert(part1.end(), part2.begin(), part2.end());
  EXPECT_EQ(part1, whole);
  EXPECT_EQ(s->num_past(), 48);
}

// A second prefill chunk attends to the first through the paged cache (here over several pages, many query
// tokens): it must agree with a single-chunk prefill up to the cache format's rounding.
TEST_F(TinyModel, ChunkedPrefillThroughPagedCacheTracksSingleChunk) {
  const std::vector<int32_t> prompt = Prompt(64, 8);
  std::vector<float> whole, part1, part2;
  ASSERT_TRUE(Session(KvMode::kBf16)->Forward(prompt, true, &whole).ok());
  auto s = Session(KvMode::kBf16);
  ASSERT_TRUE(s->Forward(std::span(prompt).first(37), true, &part1).ok());  // 2 full pages + a partial one
  ASSERT_TRUE(s->Forward(std::span(prompt).subspan(37), true, &part2).ok());
  part1.insert(part1.end(), part2.begin(), part2.end());
  EXPECT_LT(MaxAbsDiff(part1, whole) / MaxAbs(whole), 0.01);
  EXPECT_GT(MaxAbsDiff(part1, whole), 0.0);
}

// Shared prefill stores exactly what each mode's own prefill would: later decode steps agree bit for bit.
TEST_F(TinyModel, SharedPrefillEqualsSeparatePrefill) {
  const std::vector<int32_t> prompt = Prompt(70, 5);
  auto leader = Session(KvMode::kBf16);
  auto follower = Session(KvMode::kMinima);
  InferenceSession* both[] = {leader.get(), follower.get()};
  std::vector<float> shared_logits, own_logits;
  ASSERT_TRUE(InferenceSession::PrefillShared(both, prompt, &shared_logits).ok());
  auto own = Session(KvMode::kMinima);
  ASSERT_TRUE(own->Forward(prompt, false, &own_logits).ok());
  EXPECT_EQ(shared_logits, own_logits);
  const int32_t t = ArgMax(own_logits);
  ASSERT_TRUE(follower->Forward({&t, 1}, false, &shared_logits).ok());
  ASSERT_TRUE(own->Forward({&t, 1}, false, &own_logits).ok());
  EXPECT_EQ(shared_logits, own_logits);
  EXPECT_EQ(follower->num_past(), 71);
}

TEST_F(TinyModel, RejectsBadTokensAndOverflow) {
  auto s = Session(KvMode::kBf16);
  std::vector<float> logits;
  const int32_t bad = 1000;
  EXPECT_EQ(s->Forward({&bad, 1}, false, &logits).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Forward({}, false, &logits).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> too_long = Prompt(257, 6);
  EXPECT_EQ(s->Forward(too_long, false, &logits).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->num_past(), 0);
  KvMode mode;
  EXPECT_EQ(ParseKvMode("fp4", &mode).code(), StatusCode::kInvalidArgument);
}

// A page size the cache cannot take is an error naming it, before anything divides by it (was: page_tokens 0
// stopped the process with SIGFPE in InferenceSession::Create; `minimakv run --page-tokens 0` did).
TEST_F(TinyModel, BadPageTokensAreRefusedBeforeUse) {
  for (KvMode mode : {KvMode::kBf16, KvMode::kFp8, KvMode::kMinima}) {
    for (int page_tokens : {0, -1, 65537, std::numeric_limits<int>::max()}) {
      SessionOptions o;
      o.mode = mode;
      o.max_tokens = 256;
      o.page_tokens = page_tokens;
      std::unique_ptr<InferenceSession> s;
      const Status st = InferenceSession::Create(model_.get(), o, &s);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << KvModeName(mode) << " " << page_tokens;
      EXPECT_NE(st.message().find("page_tokens = " + std::to_string(page_tokens)), std::string::npos) << st.message();
      EXPECT_EQ(s, nullptr);
    }
  }
  // A thread count no machine runs is refused, not attempted (a refused thread used to end the process).
  SessionOptions threads;
  threads.num_threads = kMaxThreads + 1;
  std::unique_ptr<InferenceSession> none;
  const Status st = InferenceSession::Create(model_.get(), threads, &none);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("num_threads " + std::to_string(kMaxThreads + 1)), std::string::npos) << st.message();
  // The dense mode has no pages: its page_tokens is not used.
  SessionOptions o;
  o.mode = KvMode::kDense;
  o.max_tokens = 256;
  o.page_tokens = 0;
  std::unique_ptr<InferenceSession> s;
  EXPECT_TRUE(InferenceSession::Create(model_.get(), o, &s).ok());
}

// A dense cache larger than the machine's memory is ResourceExhausted naming max_tokens, before anything is
// allocated (was: std::bad_alloc ended the process; max_tokens 0 takes the model's context length, which some
// GGUF files put at millions of tokens). 2^31 - 1 tokens of this model's K/V are 4 TiB.
TEST_F(TinyModel, DenseCacheBeyondMemoryIsRefusedBeforeAllocating) {
  SessionOptions o;
  o.mode = KvMode::kDense;
  o.max_tokens = std::numeric_limits<int>::max();
  std::unique_ptr<InferenceSession> s;
  const Status st = InferenceSession::Create(model_.get(), o, &s);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("max_tokens 2147483647"), std::string::npos) << st.message();
  EXPECT_EQ(s, nullptr);
}

// With 2 threads the cache part of attention is split into page ranges (one AttendMixedCpu per thread, LSE
// merge); with 1 thread it is not. Both must agree up to fp32 rounding (amplified by the 8-bit activation codes
// of later matmuls), in every paged mode, over a prompt of several pages plus decode steps. Measured (session 6,
// TQ3 units 13/40/71/114): tq3 2.5e-3 relative (the same split gave < 2e-3 with the units of sessions 1-5),
// bf16 / fp8 / minima 0 (identical logits; why only tq3 differs was not traced); bound 4e-3.
TEST_F(TinyModel, CacheAttentionSplitOverThreadsMatchesOneThread) {
  const std::vector<int32_t> prompt = Prompt(100, 9);
  const std::vector<int32_t> next = Prompt(10, 10);
  for (KvMode mode : kAllPagedKvModes) {
    std::vector<float> by_threads[2];
    for (int threads : {1, 2}) {
      SessionOptions o;
      o.mode = mode;
      o.max_tokens = 256;
      o.page_tokens = 16;
      o.anchor_tokens = 16;
      o.recent_tokens = 32;
      o.num_threads = threads;
      std::unique_ptr<InferenceSession> s;
      ASSERT_TRUE(InferenceSession::Create(model_.get(), o, &s).ok());
      std::vector<float> logits;
      ASSERT_TRUE(s->Forward(std::span(prompt).first(60), true, &logits).ok());  // chunk 2 reads the cache
      by_threads[threads - 1] = logits;
      ASSERT_TRUE(s->Forward(std::span(prompt).subspan(60), true, &logits).ok());
      by_threads[threads - 1].insert(by_threads[threads - 1].end(), logits.begin(), logits.end());
      for (int32_t t : next) {
        ASSERT_TRUE(s->Forward({&t, 1}, false, &logits).ok());
        by_threads[threads - 1].insert(by_threads[threads - 1].end(), logits.begin(), logits.end());
      }
    }
    EXPECT_LT(MaxAbsDiff(by_threads[0], by_threads[1]) / MaxAbs(by_threads[0]), 4e-3) << KvModeName(mode);
  }
}

TEST(QuantMatmul, SimdMatchesScalarAndDequantizedReference) {
  std::mt19937 rng(9);
  const int64_t cols = 256, blocks = cols / 32;
  std::vector<float> x = RandomValues(&rng, size_t(cols), 1.0f);
  std::vector<Q8Block> q(static_cast<size_t>(blocks));
  QuantizeQ8(x.data(), cols, q.data());
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0}) {
    int64_t be = 0, bb = 0;
    ASSERT_TRUE(GgmlTypeBlock(uint32_t(type), &be, &bb).ok());
    std::vector<uint8_t> row(size_t(blocks * bb));
    for (auto& b : row) b = uint8_t(rng());
    for (int64_t b = 0; b < blocks; ++b) {  // sane fp16 scale / min fields
      const uint16_t d = FloatToFp16(0.01f * float(1 + b));
      row[size_t(b * bb)] = uint8_t(d & 0xFF);
      row[size_t(b * bb + 1)] = uint8_t(d >> 8);
      if (type == GgmlType::kQ4_1) {
        const uint16_t m = FloatToFp16(-0.05f);
        row[size_t(b * bb + 2)] = uint8_t(m & 0xFF);
        row[size_t(b * bb + 3)] = uint8_t(m >> 8);
      }
    }
    const float simd = DotQ8Row(type, row.data(), q.data(), blocks, false);
    const float scalar = DotQ8Row(type, row.data(), q.data(), blocks, true);
    EXPECT_NEAR(simd, scalar, 1e-5 * (1 + std::fabs(scalar))) << GgmlTypeName(type);
    // Against the exact fp32 product: only the activation quantization differs (8 bits per value).
    std::vector<float> w(static_cast<size_t>(cols));
    ASSERT_TRUE(DequantizeToFloat(type, row.data(), cols, w.data()).ok());
    double exact = 0, norm = 0;
    for (int64_t i = 0; i < cols; ++i) {
      exact += double(w[size_t(i)]) * x[size_t(i)];
      norm += std::fabs(double(w[size_t(i)]) * x[size_t(i)]);
    }
    EXPECT_NEAR(scalar, exact, 0.01 * norm) << GgmlTypeName(type);
  }
  // Q8 codes: d = amax / 127 rounded to fp16, s = (fp32 d) * sum(codes) rounded to fp16.
  for (int64_t b = 0; b < blocks; ++b) {
    int sum = 0;
    float amax = 0;
    for (int j = 0; j < 32; ++j) {
      sum += q[size_t(b)].qs[j];
      amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
    }
    EXPECT_EQ(q[size_t(b)].d, Fp16ToFloat(FloatToFp16(amax / 127.0f)));
    EXPECT_EQ(q[size_t(b)].s, Fp16ToFloat(FloatToFp16(amax / 127.0f * float(sum))));
  }
}

TEST(Sampler, GreedyAndNucleus) {
  Sampler greedy;
  ASSERT_TRUE(Sampler::Create({}, &greedy).ok());
  const std::vector<float> logits = {0.0f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(greedy.Sample(logits), 1);  // lowest id on ties
  Sampler top;
  ASSERT_TRUE(Sampler::Create({1.0f, 0.5f, 42}, &top).ok());
  for (int i = 0; i < 50; ++i) {  // nucleus of mass 0.5 holds only the two tied best tokens
    const int32_t t = top.Sample(logits);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  Sampler bad;
  EXPECT_EQ(Sampler::Create({-1.0f, 1.0f, 0}, &bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Sampler::Create({1.0f, 0.0f, 0}, &bad).code(), StatusCode::kInvalidArgument);
}

// Logits of a broken model: NaN entries are never picked, a +inf entry takes all the mass. (Before, NaN reached the
// sort's comparator: no strict weak order, undefined behaviour, and ArgMax kept a NaN token 0.)
TEST(Sampler, NanAndInfiniteLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ArgMax(std::vector<float>{nan, -5.0f, 2.0f, nan}), 2);
  EXPECT_EQ(ArgMax(std::vector<float>{nan, nan}), 0);
  Sampler greedy;
  ASSERT_TRUE(Sampler::Create({}, &greedy).ok());
  EXPECT_EQ(greedy.Sample(std::vector<float>{nan, 1.0f, 0.5f}), 1);
  Sampler hot;
  ASSERT_TRUE(Sampler::Create({1.0f, 1.0f, 7}, &hot).ok());
  std::vector<float> logits(3000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = i % 3 == 0 ? nan : float(i % 17) * 0.1f;
  for (int i = 0; i < 200; ++i) {
    const int32_t t = hot.Sample(logits);
    ASSERT_TRUE(t >= 0 && t < int32_t(logits.size())) << t;
    EXPECT_FALSE(std::isnan(logits[size_t(t)])) << t;
  }
  logits[1234] = inf;
  logits[2000] = inf;
  for (int i = 0; i < 50; ++i) {
    const int32_t t = hot.Sample(logits);
    EXPECT_TRUE(t == 1234 || t == 2000) << t;
  }
}

}  // namespace
}  // namespace minimakv
