// The real SmolLM2 model against llama.cpp's own outputs on the same GGUF (tests/fixtures/smollm2_llama_cpp.json,
// made by scripts/make_llama_cpp_fixtures.py: llama-cpp-python 0.3.36, f16 KV cache, no flash attention).
// Skipped when the model is not fetched (scripts/fetch_model.sh).
//
// What agreement to expect: this 135M Q4_1 model is numerically chaotic. Its activations are re-quantized to
// 8 bits before every matmul (as llama.cpp does), so a 1-ulp difference anywhere (exp, an accumulation order)
// can flip an int8 code and move the logits by ~0.1-0.3: toggling only the fp16 rounding of Q, K, V or of the
// attention weights in our own code moves the top logit of "The quick" by 0.1-0.3. Single-token prompts match
// llama.cpp to 4 decimals (the matmul, norm and SwiGLU arithmetic is the same); multi-token prompts differ where
// ggml's attention arithmetic (its exp approximation, f16 dot-product order) differs from ours. So the checks
// are: top-1 agreement >= 96% over 600 positions, and every disagreement sits where llama.cpp itself is nearly
// tied (top-1 minus top-2 logit < 0.5); a real bug (wrong RoPE, bad dequantization) fails both at once.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "minimakv/inference_session.h"
#include "minimakv/llama_model.h"
#include "minimakv/model_files.h"
#include "minimakv/sampler.h"
#include "runtime/runtime_test_fixtures.h"
#include "tools/json.h"

namespace minimakv {
namespace {

constexpr double kMinTop1Agreement = 0.96;  // measured 581/600 (dense, f16 emulation), 579/600 (bf16 cache)
constexpr double kMaxMissMargin = 0.5;      // measured: misses only where llama.cpp's margin <= 0.22

using testing::FixtureIds;
using testing::ReadJsonFixture;

class LlamaCppAgreement : public ::testing::TestWithParam<std::pair<KvMode, int>> {};

TEST_P(LlamaCppAgreement, Top1OverSixHundredPositions) {
  std::unique_ptr<LlamaModel> model;
  if (!LlamaModel::Load(DefaultModelPath(), &model).ok()) GTEST_SKIP() << "model not fetched";
  JsonValue root;
  ASSERT_TRUE(ReadJsonFixture("smollm2_llama_cpp.json", &root));
  const std::vector<int32_t> ids = FixtureIds(root.Find("text_ids"));
  const std::vector<int32_t> top1 = FixtureIds(root.Find("top1"));
  std::vector<double> margin;
  for (const JsonValue& m : root.Find("top1_margin")->items()) margin.push_back(m.as_double());
  ASSERT_GE(ids.size(), 500u);
  ASSERT_EQ(top1.size(), ids.size());

  const auto [mode, chunk] = GetParam();
  SessionOptions o;
  o.mode = mode;
  o.max_tokens = int(ids.size());
  std::unique_ptr<InferenceSession> session;
  ASSERT_TRUE(InferenceSession::Create(model.get(), o, &session).ok());
  const int vocab = model->config().vocab_size;
  int agree = 0;
  for (size_t c0 = 0; c0 < ids.size(); c0 += size_t(chunk)) {
    const size_t n = std::min(size_t(chunk), ids.size() - c0);
    std::vector<float> logits;
    ASSERT_TRUE(session->Forward({ids.data() + c0, n}, true, &logits).ok());
    for (size_t i = 0; i < n; ++i) {
      const int32_t ours = ArgMax({logits.data() + i * size_t(vocab), size_t(vocab)});
      if (ours == top1[c0 + i]) {
        ++agree;
      } else {
        EXPECT_LT(margin[c0 + i], kMaxMissMargin) << "position " << c0 + i << ": ours " << ours << ", llama.cpp "
                                                  << top1[c0 + i];
      }
    }
  }
  EXPECT_GE(double(agree) / double(ids.size()), kMinTop1Agreement) << agree << "/" << ids.size();
}

INSTANTIATE_TEST_SUITE_P(Modes, LlamaCppAgreement,
                         ::testing::Values(std::make_pair(KvMode::kDense, 600),   // llama.cpp f16 emulation
                                           std::make_pair(KvMode::kBf16, 128)),   // chunks read the bf16 cache
                         [](const auto& info) { return std::string(KvModeName(info.param.first)); });

}  // namespace
}  // namespace minimakv
