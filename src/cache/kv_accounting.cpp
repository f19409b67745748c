#include "minimakv/kv_accounting.h"

#include <cstdio>
#include <string>

namespace minimakv {
namespace {

constexpr double kBytesPerKib = 1024.0;

std::string Line(const char* format, auto... args) {
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), format, args...);
  return buffer;
}

double Share(int64_t part, int64_t whole) { return whole == 0 ? 0.0 : 100.0 * double(part) / double(whole); }

}  // namespace

std::string KvAccounting::ToString() const {
  std::string out;
  out += Line("KV cache: %lld sequences, %d layers x %d KV heads x head_dim %d\n", (long long)num_sequences,
              num_layers, kv_heads, head_dim);
  const double positions = num_layers == 0 ? 0.0 : double(stored_token_layers) / num_layers;
  out += Line("  live tokens %.1f (token-layers stored %lld, logical %lld)\n", positions,
              (long long)stored_token_layers, (long long)logical_token_layers);
  out += Line("  %.3f KiB per live token, %.3fx vs BF16, %.3fx vs FP8\n", bytes_per_live_token / kBytesPerKib,
              compression_vs_bf16, compression_vs_fp8);
  out += Line("  bytes: total %zu = codes %zu + scales %zu + slack %zu + metadata %zu\n", total_bytes, code_bytes,
              scale_bytes, slack_bytes, metadata_bytes);
  for (int f = 0; f < kNumKvFormats; ++f) {
    const FormatAccounting& fa = formats[f];
    if (fa.capacity_pages == 0) continue;
    const std::string name(KvFormatName(KvFormat(f)));
    out += Line("  %-4s pages %d / %d (%zu B each), token-layers %lld, codes %zu, scales %zu, slack %zu\n",
                name.c_str(), fa.live_pages, fa.capacity_pages, fa.page_bytes, (long long)fa.token_layers,
                fa.code_bytes, fa.scale_bytes, fa.slack_bytes);
  }
  out += Line("  tiers (token-layers): recent %lld (%.1f%%), anchor/pinned %lld (%.1f%%), stale tq3 %lld (%.1f%%), "
              "stale kept hot %lld (%.1f%%)\n",
              (long long)recent_token_layers, Share(recent_token_layers, stored_token_layers),
              (long long)anchor_token_layers, Share(anchor_token_layers, stored_token_layers),
              (long long)stale_tq3_token_layers, Share(stale_tq3_token_layers, stored_token_layers),
              (long long)stale_kept_hot_token_layers, Share(stale_kept_hot_token_layers, stored_token_layers));
  return out;
}

}  // namespace minimakv
