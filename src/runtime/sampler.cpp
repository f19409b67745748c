#include "minimakv/sampler.h"

#include <algorithm>
#include <cmath>

namespace minimakv {

int32_t ArgMax(std::span<const float> logits) {
  // NaN logits (a broken model or weights) never win; all NaN gives token 0.
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[size_t(best)] || (std::isnan(logits[size_t(best)]) && !std::isnan(logits[i]))) {
      best = int32_t(i);
    }
  }
  return best;
}

Status Sampler::Create(const SamplerOptions& options, Sampler* out) {
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature)) {
    return Status::InvalidArgument("sampler temperature " + std::to_string(options.temperature) + " must be >= 0");
  }
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    return Status::InvalidArgument("sampler top_p " + std::to_string(options.top_p) + " must be in (0, 1]");
  }
  out->options_ = options;
  out->rng_.seed(options.seed);
  return Status::Ok();
}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (options_.temperature == 0.0f || logits.size() <= 1) return ArgMax(logits);
  candidates_.clear();
  const float max_logit = logits[size_t(ArgMax(logits))];
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    float p = std::exp((logits[i] - max_logit) / options_.temperature);
    // A NaN logit gets no mass; a +inf maximum (inf - inf = NaN) takes it all, shared with any other +inf. So the
    // weights are ordered numbers and the sort below gets a strict weak order (NaN would make it undefined).
    if (std::isnan(p)) p = logits[i] == max_logit ? 1.0f : 0.0f;
    candidates_.emplace_back(p, int32_t(i));
    total += p;
  }
  std::sort(candidates_.begin(), candidates_.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  // Keep the nucleus: the shortest prefix whose mass reaches top_p (at least one token).
  size_t keep = 0;
  double mass = 0.0;
  while (keep < candidates_.size()) {
    mass += candidates_[keep].first;
    ++keep;
    if (mass >= options_.top_p * total) break;
  }
  std::uniform_real_distribution<double> uniform(0.0, mass);
  const double r = uniform(rng_);
  double acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += candidates_[i].first;
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace minimakv
