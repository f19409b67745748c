#include "minimakv/hadamard_rotation.h"

#include <cmath>

namespace minimakv {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed generator with a fixed, documented output.
uint64_t SplitMix64(uint64_t state) {
  uint64_t z = state + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

float HadamardSign(uint64_t seed, int coordinate) {
  const uint64_t word = SplitMix64(seed + 0x9E3779B97F4A7C15ull * uint64_t(coordinate / 64));
  return ((word >> (coordinate % 64)) & 1u) ? -1.0f : 1.0f;
}

Status HadamardRotation::Create(int head_dim, uint64_t seed, HadamardRotation* out) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    return Status::InvalidArgument("head_dim " + std::to_string(head_dim) +
                                   " cannot be rotated: the Hadamard rotation takes 64, 128 or 256");
  }
  HadamardRotation rotation;
  rotation.head_dim_ = head_dim;
  rotation.seed_ = seed;
  rotation.inv_sqrt_dim_ = float(1.0 / std::sqrt(double(head_dim)));
  rotation.signs_.resize(head_dim);
  for (int i = 0; i < head_dim; ++i) rotation.signs_[i] = HadamardSign(seed, i);
  *out = std::move(rotation);
  return Status::Ok();
}

void HadamardRotation::Forward(const float* x, float* y) const {
  for (int i = 0; i < head_dim_; ++i) y[i] = x[i] * signs_[i];
  FastWalshHadamardInPlace(y, head_dim_);
  for (int i = 0; i < head_dim_; ++i) y[i] *= inv_sqrt_dim_;
}

void HadamardRotation::Inverse(const float* y, float* x) const {
  if (x != y) {
    for (int i = 0; i < head_dim_; ++i) x[i] = y[i];
  }
  FastWalshHadamardInPlace(x, head_dim_);
  for (int i = 0; i < head_dim_; ++i) x[i] = x[i] * inv_sqrt_dim_ * signs_[i];
}

}  // namespace minimakv
