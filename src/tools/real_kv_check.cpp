#include "tools/real_kv_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "minimakv/cpu_attention.h"
#include "minimakv/fp8_codec.h"
#include "minimakv/reference_attention.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {
namespace {

constexpr uint8_t kPoisonByte = 0xFF;  // E4M3 0xFF is NaN; four of them make a NaN fp32 scale

bool IsTq3(KvFormat f) { return f == KvFormat::kTq3; }

// Encodes one (token, head) vector into a page of `layout` at slot `token_slot`. K and V alike (is_value).
Status EncodeVector(const PageLayout& layout, const HadamardRotation& rotation, const float* x, int head,
                    int token_slot, bool is_value, uint8_t* page) {
  const int d = layout.head_dim;
  uint8_t* codes = page + (is_value ? layout.v_codes_offset(head, token_slot) : layout.k_codes_offset(head, token_slot));
  uint8_t* scale = page + (is_value ? layout.v_scale_offset(head, token_slot) : layout.k_scale_offset(head, token_slot));
  uint8_t fp8_codes[256];
  float fp8_scale = 0.0f;
  if (layout.format == KvFormat::kFp8) {
    MINIMAKV_RETURN_IF_ERROR(Fp8EncodeVector(x, d, codes, &fp8_scale));
    std::memcpy(scale, &fp8_scale, sizeof(fp8_scale));
    return Status::Ok();
  }
  // TQ3: what PagedCache's conversion (and CudaConvertFp8ToTq3) encodes is the FP8 page's decode.
  MINIMAKV_RETURN_IF_ERROR(Fp8EncodeVector(x, d, fp8_codes, &fp8_scale));
  float fp8_decoded[256];
  Fp8DecodeVector(fp8_codes, fp8_scale, d, fp8_decoded);
  uint16_t scale_fp16 = 0;
  MINIMAKV_RETURN_IF_ERROR(Tq3EncodeVector(rotation, fp8_decoded, codes, &scale_fp16));
  std::memcpy(scale, &scale_fp16, sizeof(scale_fp16));
  return Status::Ok();
}

// ||a - b||, ||b|| and the smallest per-head cosine over one query's heads.
struct Distance {
  double rel_l2 = 0.0;
  double cos_min = 1.0;
};
template <typename A, typename B>
Distance Compare(const A* a, const B* b, int heads, int head_dim) {
  double err2 = 0.0, ref2 = 0.0;
  Distance d;
  for (int h = 0; h < heads; ++h) {
    double dot = 0.0, aa = 0.0, bb = 0.0;
    for (int i = 0; i < head_dim; ++i) {
      const double x = double(a[h * head_dim + i]), y = double(b[h * head_dim + i]);
      err2 += (x - y) * (x - y);
      dot += x * y;
      aa += x * x;
      bb += y * y;
    }
    ref2 += bb;
    // Two zero vectors agree; one zero vector against a nonzero one gets cosine 0.
    const double cos = (aa == 0.0 && bb == 0.0) ? 1.0 : (aa == 0.0 || bb == 0.0) ? 0.0 : dot / std::sqrt(aa * bb);
    d.cos_min = std::min(d.cos_min, std::isnan(cos) ? -2.0 : cos);
  }
  d.rel_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return d;
}

}  // namespace

const char* RealKvMixName(RealKvMix mix) {
  switch (mix) {
    case RealKvMix::kMinima: return "minima";
    case RealKvMix::kAllFp8: return "fp8";
    case RealKvMix::kAllTq3: return "tq3";
  }
  return "unknown";
}

Status ParseRealKvMix(std::string_view name, RealKvMix* mix) {
  for (RealKvMix m : kAllRealKvMixes) {
    if (name == RealKvMixName(m)) {
      *mix = m;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown mix '" + std::string(name) + "' (minima, fp8, tq3)");
}

KvFormat RealKvPageFormat(const KvCapture& capture, RealKvMix mix, int64_t seq_tokens, int64_t page) {
  switch (mix) {
    case RealKvMix::kAllFp8: return KvFormat::kFp8;
    case RealKvMix::kAllTq3: return KvFormat::kTq3;
    case RealKvMix::kMinima: break;
  }
  const int64_t first = page * capture.page_tokens, end = first + capture.page_tokens;  // tokens [first, end)
  const bool full = end <= seq_tokens;
  const bool anchor = first < capture.anchor_tokens;
  const bool recent = end - 1 >= seq_tokens - capture.recent_tokens;
  return full && !anchor && !recent ? KvFormat::kTq3 : KvFormat::kFp8;
}

uint8_t* RealKvPool::base() {
  const uintptr_t p = reinterpret_cast<uintptr_t>(storage.data());
  return storage.data() + ((kPageAlignBytes - p % kPageAlignBytes) % kPageAlignBytes);
}
const uint8_t* RealKvPool::base() const { return const_cast<RealKvPool*>(this)->base(); }

PagedKvView RealKvPages::View(int f) const {
  const RealKvPool& pool = pools[f];
  return PagedKvView{pool.layout, pool.base(), num_seqs, pool.page_indptr.data(), pool.page_ids.data(),
                     pool.last_page_tokens.data()};
}

Status BuildRealKvPages(const KvCapture& capture, size_t layer_slot, RealKvMix mix, uint64_t shuffle_seed,
                        RealKvPages* out) {
  MINIMAKV_RETURN_IF_ERROR(ValidateKvCapture(capture));
  if (layer_slot >= capture.layers.size()) {
    return Status::InvalidArgument("layer slot " + std::to_string(layer_slot) + " of a capture of " +
                                   std::to_string(capture.layers.size()) + " layers");
  }
  HadamardRotation rotation;
  MINIMAKV_RETURN_IF_ERROR(HadamardRotation::Create(capture.head_dim, capture.rotation_seed, &rotation));
  const KvCaptureLayer& layer = capture.layers[layer_slot];
  const int P = capture.page_tokens, heads = capture.kv_heads, d = capture.head_dim;
  RealKvPages& pages = *out;
  pages = RealKvPages();
  pages.mix = mix;
  pages.num_seqs = capture.num_queries;
  const KvFormat formats[2] = {KvFormat::kFp8, KvFormat::kTq3};

  // 1. Page lists: logical pages of each sequence per format, in logical order (so a partial last page comes last).
  struct LogicalPage {
    int seq;
    int64_t page;
  };
  std::vector<LogicalPage> listed[2];
  for (int f = 0; f < 2; ++f) {
    RealKvPool& pool = pages.pools[f];
    pool.layout = PageLayout{formats[f], heads, d, P};
    pool.page_indptr.assign(1, 0);
    pool.last_page_tokens.assign(size_t(pages.num_seqs), 0);
  }
  for (int s = 0; s < pages.num_seqs; ++s) {
    const int64_t n = capture.QueryContextTokens(s);
    const int64_t num_pages = (n + P - 1) / P;
    for (int64_t p = 0; p < num_pages; ++p) {
      const int f = IsTq3(RealKvPageFormat(capture, mix, n, p)) ? 1 : 0;
      listed[f].push_back({s, p});
      pages.pools[f].last_page_tokens[size_t(s)] = int32_t(std::min<int64_t>(P, n - p * P));
    }
    for (int f = 0; f < 2; ++f) pages.pools[f].page_indptr.push_back(int32_t(listed[f].size()));
  }

  // 2. Physical ids: a seeded shuffle of the pool's slots (Fisher-Yates on mt19937_64, the same on every host),
  // with about one spare slot per eight pages left poisoned.
  std::mt19937_64 rng(shuffle_seed);
  for (int f = 0; f < 2; ++f) {
    RealKvPool& pool = pages.pools[f];
    const int32_t used = int32_t(listed[f].size());
    pool.capacity_pages = used + used / 8 + 1;
    std::vector<int32_t> slots(size_t(pool.capacity_pages));
    for (int32_t i = 0; i < pool.capacity_pages; ++i) slots[size_t(i)] = i;
    for (int32_t i = pool.capacity_pages - 1; i > 0; --i) std::swap(slots[size_t(i)], slots[size_t(rng() % uint64_t(i + 1))]);
    pool.page_ids.assign(slots.begin(), slots.begin() + used);
    pool.storage.assign(pool.pool_bytes() + kPageAlignBytes, kPoisonByte);
  }

  // 3. Encode every listed page into its slot (zeroed first: the unused tail of a partial page is zero bytes,
  // as PagePool::Allocate leaves it).
  const size_t row = size_t(heads) * d;
  for (int f = 0; f < 2; ++f) {
    RealKvPool& pool = pages.pools[f];
    const size_t page_bytes = pool.layout.page_bytes();
    for (size_t i = 0; i < listed[f].size(); ++i) {
      const LogicalPage& lp = listed[f][i];
      uint8_t* page = pool.base() + size_t(pool.page_ids[i]) * page_bytes;
      std::memset(page, 0, page_bytes);
      const int64_t n = capture.QueryContextTokens(lp.seq);
      const int64_t first = lp.page * P, end = std::min<int64_t>(n, first + P);
      for (int64_t t = first; t < end; ++t) {
        for (int h = 0; h < heads; ++h) {
          const size_t at = size_t(t) * row + size_t(h) * d;
          MINIMAKV_RETURN_IF_ERROR(
              EncodeVector(pool.layout, rotation, layer.k.data() + at, h, int(t - first), false, page));
          MINIMAKV_RETURN_IF_ERROR(
              EncodeVector(pool.layout, rotation, layer.v.data() + at, h, int(t - first), true, page));
        }
      }
    }
  }
  return Status::Ok();
}

void DenseReferenceAttention(const KvCapture& capture, size_t layer_slot, std::vector<double>* out) {
  const KvCaptureLayer& layer = capture.layers[layer_slot];
  const int d = capture.head_dim, group = capture.num_q_heads / capture.kv_heads;
  const size_t row = size_t(capture.kv_heads) * d;
  out->assign(size_t(capture.num_queries) * capture.num_q_heads * d, 0.0);
  std::vector<float> keys, values;
  for (int qi = 0; qi < capture.num_queries; ++qi) {
    const int64_t n = capture.QueryContextTokens(qi);
    for (int g = 0; g < capture.kv_heads; ++g) {
      // This KV head's tokens as [n][d] rows, the layout DenseAttentionF64 reads.
      keys.resize(size_t(n) * d);
      values.resize(keys.size());
      for (int64_t t = 0; t < n; ++t) {
        std::memcpy(&keys[size_t(t) * d], &layer.k[size_t(t) * row + size_t(g) * d], sizeof(float) * size_t(d));
        std::memcpy(&values[size_t(t) * d], &layer.v[size_t(t) * row + size_t(g) * d], sizeof(float) * size_t(d));
      }
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const size_t at = (size_t(qi) * capture.num_q_heads + size_t(h)) * d;
        DenseAttentionF64(layer.q.data() + at, keys.data(), values.data(), n, d, capture.sm_scale, out->data() + at,
                          nullptr);
      }
    }
  }
}

Status ComputeRealKvCpuSide(const KvCapture& capture, size_t layer_slot, const RealKvPages& pages,
                            const HadamardRotation& rotation, int num_threads, RealKvCpuSide* out) {
  if (layer_slot >= capture.layers.size()) return Status::InvalidArgument("bad layer slot");
  const KvCaptureLayer& layer = capture.layers[layer_slot];
  std::vector<int32_t> q_indptr(size_t(capture.num_queries) + 1);
  for (int i = 0; i <= capture.num_queries; ++i) q_indptr[size_t(i)] = i;
  const AttentionQueries queries{layer.q.data(), q_indptr.data(), capture.num_queries, capture.num_q_heads,
                                 capture.sm_scale};
  const PagedKvView views[2] = {pages.View(RealKvPages::kFp8), pages.View(RealKvPages::kTq3)};
  const size_t rows = size_t(capture.num_queries) * capture.num_q_heads;
  out->out.assign(rows * capture.head_dim, 0.0f);
  out->lse_log2.assign(rows, 0.0f);
  CpuAttentionOptions options;
  options.num_threads = std::max(1, num_threads);
  MINIMAKV_RETURN_IF_ERROR(AttendMixedCpu(views, queries, &rotation, out->out.data(), out->lse_log2.data(), options));
  std::vector<double> lse;
  MINIMAKV_RETURN_IF_ERROR(ReferenceAttention(views, queries, &rotation, &out->pages_ref, &lse));
  DenseReferenceAttention(capture, layer_slot, &out->dense_ref);
  return Status::Ok();
}

Status CompareRealKv(const KvCapture& capture, size_t layer_slot, const RealKvPages& pages, const RealKvCpuSide& cpu,
                     const float* gpu_out, const float* gpu_lse, const float* replay_out, double max_rel_l2,
                     std::vector<RealKvRow>* rows) {
  if (gpu_out == nullptr || gpu_lse == nullptr || rows == nullptr) {
    return Status::InvalidArgument("CompareRealKv: null output");
  }
  if (layer_slot >= capture.layers.size()) return Status::InvalidArgument("bad layer slot");
  const int heads = capture.num_q_heads, d = capture.head_dim;
  const size_t values = size_t(capture.num_queries) * heads * d;
  if (cpu.out.size() != values || cpu.pages_ref.size() != values || cpu.dense_ref.size() != values ||
      cpu.lse_log2.size() != size_t(capture.num_queries) * heads) {
    return Status::InvalidArgument("CompareRealKv: the CPU side does not match the capture's shape");
  }
  for (int qi = 0; qi < capture.num_queries; ++qi) {
    const size_t at = size_t(qi) * heads * d;
    RealKvRow r;
    r.layer = capture.layers[layer_slot].layer;
    r.mix = pages.mix;
    r.query = qi;
    r.context_tokens = capture.QueryContextTokens(qi);
    const RealKvPool& fp8 = pages.pools[RealKvPages::kFp8];
    const RealKvPool& tq3 = pages.pools[RealKvPages::kTq3];
    r.fp8_pages = fp8.page_indptr[size_t(qi) + 1] - fp8.page_indptr[size_t(qi)];
    r.tq3_pages = tq3.page_indptr[size_t(qi) + 1] - tq3.page_indptr[size_t(qi)];
    r.gpu_vs_cpu_rel_l2 = Compare(gpu_out + at, cpu.out.data() + at, heads, d).rel_l2;
    r.gpu_vs_pages_rel_l2 = Compare(gpu_out + at, cpu.pages_ref.data() + at, heads, d).rel_l2;
    r.cpu_vs_pages_rel_l2 = Compare(cpu.out.data() + at, cpu.pages_ref.data() + at, heads, d).rel_l2;
    const Distance gpu_dense = Compare(gpu_out + at, cpu.dense_ref.data() + at, heads, d);
    const Distance cpu_dense = Compare(cpu.out.data() + at, cpu.dense_ref.data() + at, heads, d);
    r.gpu_vs_dense_rel_l2 = gpu_dense.rel_l2;
    r.gpu_vs_dense_cos_min = gpu_dense.cos_min;
    r.cpu_vs_dense_rel_l2 = cpu_dense.rel_l2;
    r.cpu_vs_dense_cos_min = cpu_dense.cos_min;
    if (replay_out != nullptr) {
      r.replay_rel_l2 = Compare(replay_out + at, gpu_out + at, heads, d).rel_l2;
      r.replay_identical = std::memcmp(replay_out + at, gpu_out + at, sizeof(float) * size_t(heads) * d) == 0;
    }
    bool lse_finite = true;
    for (int h = 0; h < heads; ++h) {
      const double g = gpu_lse[size_t(qi) * heads + h], c = cpu.lse_log2[size_t(qi) * heads + h];
      lse_finite = lse_finite && std::isfinite(g) && std::isfinite(c);
      r.gpu_lse_max_abs_diff = std::max(r.gpu_lse_max_abs_diff, std::abs(g - c));
    }
    const double figures[] = {r.gpu_vs_cpu_rel_l2,   r.gpu_vs_pages_rel_l2, r.cpu_vs_pages_rel_l2,
                              r.gpu_vs_dense_rel_l2, r.cpu_vs_dense_rel_l2, r.gpu_vs_dense_cos_min,
                              r.cpu_vs_dense_cos_min, r.replay_rel_l2};
    bool finite = lse_finite;
    for (double x : figures) finite = finite && std::isfinite(x);
    // NaN outputs make every comparison false, so `pass` needs the figures finite AND inside the bounds.
    r.pass = finite && r.gpu_vs_cpu_rel_l2 <= max_rel_l2 && r.replay_rel_l2 <= max_rel_l2 &&
             r.gpu_lse_max_abs_diff <= kRealKvMaxLseDiff;
    rows->push_back(r);
  }
  return Status::Ok();
}

RealKvRow WorstRealKvRow(const std::vector<RealKvRow>& rows) {
  RealKvRow w = rows.front();
  w.query = -1;
  // max / min that let a NaN through (std::max would drop it), so a NaN figure stays visible.
  auto worse_max = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); };
  auto worse_min = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); };
  for (const RealKvRow& r : rows) {
    if (r.context_tokens > w.context_tokens) {
      w.context_tokens = r.context_tokens;
      w.fp8_pages = r.fp8_pages;
      w.tq3_pages = r.tq3_pages;
    }
    w.gpu_vs_cpu_rel_l2 = worse_max(w.gpu_vs_cpu_rel_l2, r.gpu_vs_cpu_rel_l2);
    w.gpu_lse_max_abs_diff = worse_max(w.gpu_lse_max_abs_diff, r.gpu_lse_max_abs_diff);
    w.gpu_vs_pages_rel_l2 = worse_max(w.gpu_vs_pages_rel_l2, r.gpu_vs_pages_rel_l2);
    w.cpu_vs_pages_rel_l2 = worse_max(w.cpu_vs_pages_rel_l2, r.cpu_vs_pages_rel_l2);
    w.gpu_vs_dense_rel_l2 = worse_max(w.gpu_vs_dense_rel_l2, r.gpu_vs_dense_rel_l2);
    w.cpu_vs_dense_rel_l2 = worse_max(w.cpu_vs_dense_rel_l2, r.cpu_vs_dense_rel_l2);
    w.gpu_vs_dense_cos_min = worse_min(w.gpu_vs_dense_cos_min, r.gpu_vs_dense_cos_min);
    w.cpu_vs_dense_cos_min = worse_min(w.cpu_vs_dense_cos_min, r.cpu_vs_dense_cos_min);
    w.replay_rel_l2 = worse_max(w.replay_rel_l2, r.replay_rel_l2);
    w.replay_identical = w.replay_identical && r.replay_identical;
    w.pass = w.pass && r.pass;
  }
  return w;
}

std::string RealKvTableHeader() {
  char line[256];
  std::snprintf(line, sizeof(line), "%5s %-6s %-14s %2s %6s %4s %4s %10s %9s %10s %10s %10s %10s %9s %9s %9s %4s",
                "layer", "mix", "gpu_kernels", "q", "ctx", "fp8p", "tq3p", "gpu~cpu", "lse_diff", "gpu~pages",
                "cpu~pages", "gpu~dense", "cpu~dense", "gpu_cos", "cpu_cos", "replay", "ok");
  return line;
}

std::string RealKvTableRow(const RealKvRow& r) {
  char line[256];
  const std::string query = r.query < 0 ? "*" : std::to_string(r.query);  // * = the worst over all queries
  // replay: "same" when every bit of the replayed step equals the first run, else its relative L2 to it.
  char replay[16];
  if (r.replay_identical) {
    std::snprintf(replay, sizeof(replay), "same");
  } else {
    std::snprintf(replay, sizeof(replay), "%.2e", r.replay_rel_l2);
  }
  std::snprintf(line, sizeof(line),
                "%5d %-6s %-14s %2s %6lld %4d %4d %10.2e %9.2e %10.2e %10.2e %10.2e %10.2e %9.6f %9.6f %9s %4s", r.layer,
                RealKvMixName(r.mix), r.gpu_variant.c_str(), query.c_str(), (long long)r.context_tokens, r.fp8_pages,
                r.tq3_pages, r.gpu_vs_cpu_rel_l2, r.gpu_lse_max_abs_diff, r.gpu_vs_pages_rel_l2, r.cpu_vs_pages_rel_l2,
                r.gpu_vs_dense_rel_l2, r.cpu_vs_dense_rel_l2, r.gpu_vs_dense_cos_min, r.cpu_vs_dense_cos_min, replay,
                r.pass ? "ok" : "FAIL");
  return line;
}

std::string RealKvRowJson(const RealKvRow& r) {
  // %.9g keeps every figure to fp32-and-better precision; NaN / inf are written as null (JSON has neither).
  auto num = [](double x) {
    if (!std::isfinite(x)) return std::string("null");
    char text[32];
    std::snprintf(text, sizeof(text), "%.9g", x);
    return std::string(text);
  };
  std::string s = "{\"layer\": " + std::to_string(r.layer) + ", \"mix\": \"" + RealKvMixName(r.mix) +
                  "\", \"gpu_kernels\": \"" + r.gpu_variant + "\", \"query\": " + std::to_string(r.query) + ", \"context_tokens\": " +
                  std::to_string(r.context_tokens) + ", \"fp8_pages\": " + std::to_string(r.fp8_pages) +
                  ", \"tq3_pages\": " + std::to_string(r.tq3_pages);
  s += ", \"gpu_vs_cpu_rel_l2\": " + num(r.gpu_vs_cpu_rel_l2);
  s += ", \"gpu_lse_max_abs_diff\": " + num(r.gpu_lse_max_abs_diff);
  s += ", \"gpu_vs_pages_rel_l2\": " + num(r.gpu_vs_pages_rel_l2);
  s += ", \"cpu_vs_pages_rel_l2\": " + num(r.cpu_vs_pages_rel_l2);
  s += ", \"gpu_vs_dense_rel_l2\": " + num(r.gpu_vs_dense_rel_l2);
  s += ", \"cpu_vs_dense_rel_l2\": " + num(r.cpu_vs_dense_rel_l2);
  s += ", \"gpu_vs_dense_cos_min\": " + num(r.gpu_vs_dense_cos_min);
  s += ", \"cpu_vs_dense_cos_min\": " + num(r.cpu_vs_dense_cos_min);
  s += ", \"replay_rel_l2\": " + num(r.replay_rel_l2);
  s += std::string(", \"replay_identical\": ") + (r.replay_identical ? "true" : "false");
  s += std::string(", \"pass\": ") + (r.pass ? "true" : "false") + "}";
  return s;
}

}  // namespace minimakv
