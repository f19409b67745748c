// The library behind `minimakv fidelity`: how far each storage path's attention output is from fp64 dense
// attention on the ORIGINAL (unquantized) K/V, on synthetic K/V with the structure real models show:
//   keys    Gaussian plus a few fixed outlier channels (~10x scale, the channels every head shares across
//           tokens), RoPE applied per position (rotate-half pairs, base rope_theta)
//   values  Gaussian
//   queries the last `num_queries` decode positions; each is noise plus a few planted directions toward chosen
//           earlier keys, so attention is peaked on some tokens as in retrieval heads
// Every path runs the production direct kernels (AttendMixedCpu) on pages built by tools/synthetic_kv.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "minimakv/status.h"

namespace minimakv {

// Limits of a fidelity run: larger ones are an InvalidArgument naming the value.
inline constexpr int64_t kMaxFidelityContext = int64_t(1) << 24;
inline constexpr int kMaxFidelityQueries = 4096;

struct FidelityConfig {
  int head_dim = 128;
  int kv_heads = 8;
  int q_heads = 32;
  int64_t context = 8192;
  int num_queries = 16;
  int page_tokens = 64;
  int anchor_tokens = 256;
  int recent_tokens = 1024;
  uint64_t seed = 1;
  double rope_theta = 500000.0;  // Llama 3.1; 10000 for older models
  int outlier_channels = 4;      // per KV head, fixed across tokens
  double outlier_scale = 10.0;
  int planted_tokens = 3;        // strongly attended tokens per (query, head)
  int num_threads = 2;
};

struct FidelityRow {
  std::string path;       // bf16 | fp8 | tq3 | minima
  double rel_l2 = 0.0;    // ||out - ref|| / ||ref|| over all (query, head) outputs
  double cosine = 0.0;    // mean over (query, head) of cos(out, ref)
  double top1_agreement = 0.0;  // fraction of (query, head) whose most attended token matches the reference
  double bits_per_value = 0.0;  // K/V payload bits (codes + scales) per stored value, averaged over tokens
};

Status RunFidelity(const FidelityConfig& config, const std::function<void(const std::string&)>& progress,
                   std::vector<FidelityRow>* rows);

}  // namespace minimakv
