// Sampler: picks the next token from logits. Greedy (temperature 0) takes the arg-max (lowest id on ties);
// otherwise softmax at `temperature`, restricted to the smallest set of most likely tokens whose
// probability reaches top_p (nucleus sampling, arXiv 1904.09751), drawn with a seeded generator so runs
// repeat exactly. NaN logits are never picked (token 0 if all are NaN); +inf logits share all the mass.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "minimakv/status.h"

namespace minimakv {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;        // (0, 1]
  uint64_t seed = 0;
};

class Sampler {
 public:
  // InvalidArgument for temperature < 0 or top_p outside (0, 1].
  static Status Create(const SamplerOptions& options, Sampler* out);
  int32_t Sample(std::span<const float> logits);

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

// Arg-max with the lowest index on ties; NaN entries are skipped (0 if all are NaN).
int32_t ArgMax(std::span<const float> logits);

}  // namespace minimakv
