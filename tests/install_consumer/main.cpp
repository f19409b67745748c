// Uses the installed library: plans capacity with the paper's inputs and round-trips a vector through TQ3.
// Exit status 0 only when both give the expected results.
#include <cmath>
#include <cstdio>
#include <vector>

#include "minimakv/capacity_plan.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/model_shape.h"
#include "minimakv/tq3_codec.h"

int main() {
  using namespace minimakv;
  ModelShape qwen;
  CapacityPlan plan;
  if (!ModelShapeFromPreset("qwen3.6-27b", &qwen).ok() ||
      !PlanCapacity(qwen, PlanPolicy{}, CapacityInputs{.context_tokens = 32768}, &plan).ok()) {
    std::fprintf(stderr, "consumer: capacity plan failed\n");
    return 1;
  }
  std::printf("qwen3.6-27b @32K: bf16 %lld, fp8 %lld, minima %lld concurrent requests (%.3f KiB/token)\n",
              (long long)plan.bf16.concurrency, (long long)plan.fp8.concurrency, (long long)plan.minima.concurrency,
              plan.minima.kib_per_token);
  if (plan.bf16.concurrency != 28 || plan.fp8.concurrency != 53) return 1;

  constexpr int kHeadDim = 128;
  HadamardRotation rotation;
  if (!HadamardRotation::Create(kHeadDim, HadamardRotation::kDefaultSeed, &rotation).ok()) return 1;
  std::vector<float> x(kHeadDim), x_hat(kHeadDim);
  for (int i = 0; i < kHeadDim; ++i) x[i] = std::sin(0.37f * float(i)) + 0.1f * float(i % 7);
  std::vector<uint8_t> codes(Tq3CodeBytes(kHeadDim));
  uint16_t scale = 0;
  if (!Tq3EncodeVector(rotation, x.data(), codes.data(), &scale).ok()) return 1;
  Tq3DecodeVector(rotation, codes.data(), scale, x_hat.data());
  double err = 0, ref = 0;
  for (int i = 0; i < kHeadDim; ++i) {
    err += double(x[i] - x_hat[i]) * (x[i] - x_hat[i]);
    ref += double(x[i]) * x[i];
  }
  const double nmse = err / ref;
  std::printf("TQ3 round trip, d=%d: %zu code bytes, normalized MSE %.4f\n", kHeadDim, codes.size(), nmse);
  // 3-bit Lloyd-Max on one vector: about 0.035 expected; 0.1 flags a broken codec, not noise.
  constexpr double kMaxNmse = 0.1;
  return nmse < kMaxNmse ? 0 : 1;
}
