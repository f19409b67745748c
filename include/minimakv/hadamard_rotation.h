// HadamardRotation: the seeded randomized Hadamard transform TQ3 quantizes in.
//   forward  y = H D x / sqrt(d)      inverse  x = D H y / sqrt(d)
// H is the d x d Sylvester-Hadamard matrix (entries +-1, H H = d I), D = diag(+-1) drawn from a seed, so the
// transform is orthonormal and |y| = |x|. ref: TurboQuant, arXiv 2504.19874, Sec. 3 (random rotation).
// All arithmetic is fp32 in a fixed butterfly order (see FastWalshHadamardInPlace), so any implementation
// that follows the same passes (the CUDA kernels do) gets the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include "minimakv/host_device.h"
#include "minimakv/status.h"

namespace minimakv {

// Unnormalized fast Walsh-Hadamard transform, in place. Pass h = 1, 2, 4, ..., d/2; within a pass each pair
// (j, j+h) with (j & h) == 0 becomes (a + b, a - b). Elements of one pass are independent, so parallel
// versions reproduce these bits exactly.
MINIMAKV_HOST_DEVICE inline void FastWalshHadamardInPlace(float* v, int d) {
  for (int h = 1; h < d; h *= 2) {
    for (int j = 0; j < d; ++j) {
      if (j & h) continue;
      const float a = v[j];
      const float b = v[j + h];
      v[j] = a + b;
      v[j + h] = a - b;
    }
  }
}

class HadamardRotation {
 public:
  // Seed used when the caller gives none; stored in every cache so pages can be decoded later.
  static constexpr uint64_t kDefaultSeed = 0x6D696E696D614B56ull;  // "minimaKV"

  // InvalidArgument unless head_dim is 64, 128 or 256.
  static Status Create(int head_dim, uint64_t seed, HadamardRotation* out);

  int head_dim() const { return head_dim_; }
  uint64_t seed() const { return seed_; }
  // +1 or -1 per coordinate: the diagonal of D.
  const std::vector<float>& signs() const { return signs_; }
  // fp32 1/sqrt(d), the normalization every implementation must use.
  float inv_sqrt_dim() const { return inv_sqrt_dim_; }

  // y = H D x / sqrt(d). x and y may alias.
  void Forward(const float* x, float* y) const;
  // x = D H y / sqrt(d). x and y may alias.
  void Inverse(const float* y, float* x) const;

 private:
  int head_dim_ = 0;
  uint64_t seed_ = 0;
  float inv_sqrt_dim_ = 0.0f;
  std::vector<float> signs_;
};

// The sign of coordinate i for a seed: bit (i % 64) of splitmix64 step (i / 64). Exposed so GPU code and
// tests derive the same D.
float HadamardSign(uint64_t seed, int coordinate);

}  // namespace minimakv
