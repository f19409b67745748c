// Portable scalar attention kernels: one token at a time, exact online softmax in base 2. They are the
// reference the AVX-512 kernels are checked against, and the fallback on CPUs without AVX-512.
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/tq3_codec.h"

namespace minimakv::cpu {

void WriteEmptyState(const KernelTask& task, int head_dim) {
  for (int r = 0; r < task.num_rows; ++r) {
    std::memset(task.out_rows[r], 0, sizeof(float) * size_t(head_dim));
    *task.lse_rows[r] = -INFINITY;
  }
}

namespace {

constexpr int kMaxHeadDim = 256;

// Decodes one vector of the page to fp32 in the kernel's working domain (rotated for TQ3), scale applied.
void DecodeWorking(const PageLayout& layout, const uint8_t* page, size_t codes_offset, size_t scale_offset,
                   float* x) {
  const int d = layout.head_dim;
  switch (layout.format) {
    case KvFormat::kBf16: {
      const uint8_t* codes = page + codes_offset;
      for (int i = 0; i < d; ++i) {
        uint16_t h;
        std::memcpy(&h, codes + 2 * i, sizeof h);
        x[i] = Bf16ToFloat(h);
      }
      break;
    }
    case KvFormat::kFp8: {
      float scale;
      std::memcpy(&scale, page + scale_offset, sizeof scale);
      const uint8_t* codes = page + codes_offset;
      for (int i = 0; i < d; ++i) x[i] = E4m3ToFloat(codes[i]) * scale;
      break;
    }
    case KvFormat::kTq3: {
      uint16_t scale;
      std::memcpy(&scale, page + scale_offset, sizeof scale);
      Tq3DecodeRotated(page + codes_offset, scale, d, x);
      break;
    }
  }
}

}  // namespace

void AttendScalar(const KernelTask& task) {
  const PageLayout& layout = task.view->layout;
  const int d = layout.head_dim;
  if (task.num_pages == 0) {
    WriteEmptyState(task, d);
    return;
  }
  const bool rotated = layout.format == KvFormat::kTq3;
  float q[kMaxTaskRows][kMaxHeadDim];
  float acc[kMaxTaskRows][kMaxHeadDim];
  float running_max[kMaxTaskRows];
  float running_sum[kMaxTaskRows];
  for (int r = 0; r < task.num_rows; ++r) {
    if (rotated) {
      task.rotation->Forward(task.q_rows[r], q[r]);
    } else {
      std::memcpy(q[r], task.q_rows[r], sizeof(float) * size_t(d));
    }
    for (int i = 0; i < d; ++i) q[r][i] *= task.score_scale_log2;
    std::memset(acc[r], 0, sizeof(float) * size_t(d));
    running_max[r] = -INFINITY;
    running_sum[r] = 0.0f;
  }
  float key[kMaxHeadDim];
  float value[kMaxHeadDim];
  for (int p = 0; p < task.num_pages; ++p) {
    const uint8_t* page = task.view->pages + size_t(task.page_ids[p]) * layout.page_bytes();
    const int tokens = p + 1 == task.num_pages ? task.last_page_tokens : layout.page_tokens;
    for (int t = 0; t < tokens; ++t) {
      DecodeWorking(layout, page, layout.k_codes_offset(task.kv_head, t), layout.k_scale_offset(task.kv_head, t),
                    key);
      DecodeWorking(layout, page, layout.v_codes_offset(task.kv_head, t), layout.v_scale_offset(task.kv_head, t),
                    value);
      for (int r = 0; r < task.num_rows; ++r) {
        float score = 0.0f;
        for (int i = 0; i < d; ++i) score += q[r][i] * key[i];
        if (score > running_max[r]) {
          // New maximum: rescale what was accumulated so every weight stays 2^(s - max) <= 1.
          const float rescale = std::exp2(running_max[r] - score);
          for (int i = 0; i < d; ++i) acc[r][i] *= rescale;
          running_sum[r] *= rescale;
          running_max[r] = score;
        }
        const float weight = std::exp2(score - running_max[r]);
        running_sum[r] += weight;
        for (int i = 0; i < d; ++i) acc[r][i] += weight * value[i];
      }
    }
  }
  for (int r = 0; r < task.num_rows; ++r) {
    const float inv_sum = 1.0f / running_sum[r];
    for (int i = 0; i < d; ++i) acc[r][i] *= inv_sum;
    if (rotated) {
      task.rotation->Inverse(acc[r], task.out_rows[r]);
    } else {
      std::memcpy(task.out_rows[r], acc[r], sizeof(float) * size_t(d));
    }
    *task.lse_rows[r] = running_max[r] + std::log2(running_sum[r]);
  }
}

}  // namespace minimakv::cpu
