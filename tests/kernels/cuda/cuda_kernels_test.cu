// GPU correctness program (plain executable: the GPU machine has no GoogleTest). Exit code 0 only if every check
// passed. Every kernel runs against the CPU codecs on the same bytes:
//   append, convert  bit-identical to Fp8EncodeVector / Bf16EncodeVector / Tq3EncodeVector (whole pool compared,
//                    untouched bytes and canaries included)
//   decode + merge   relative L2 <= 1e-3 against an fp64 softmax over the same dequantized pages (CPU decoders),
//                    random shuffled page ids, odd lengths, empty sequences, partial last pages, garbage (NaN bytes)
//                    in unused page slots, canaries around outputs and workspace, CUDA-graph replay identical.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "minimakv/bf16_codec.h"
#include "minimakv/cuda_attention.h"
#include "minimakv/cuda_cache_ops.h"
#include "minimakv/fp8_codec.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/page_layout.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/tq3_codec.h"

using namespace minimakv;

namespace {

int g_failures = 0;
int g_checks = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    ++g_checks;                                                       \
    if (!(cond)) {                                                    \
      ++g_failures;                                                   \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);     \
      std::printf(__VA_ARGS__);                                       \
      std::printf("\n");                                              \
    }                                                                 \
  } while (0)

#define CUDA_OK(expr)                                                                               \
  do {                                                                                              \
    cudaError_t e_ = (expr);                                                                        \
    if (e_ != cudaSuccess) {                                                                        \
      std::printf("FATAL %s:%d: %s -> %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_));    \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

#define STATUS_OK(expr)                                                                             \
  do {                                                                                              \
    Status s_ = (expr);                                                                             \
    if (!s_.ok()) {                                                                                 \
      std::printf("FATAL %s:%d: %s -> %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str());     \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

constexpr uint8_t kPoolFill = 0xFF;    // NaN in bf16, E4M3 and fp32 scales: unused slots are poison
constexpr uint8_t kCanaryByte = 0x5C;
constexpr size_t kCanaryBytes = 4096;

// Device buffer with canary bytes on both sides.
struct GuardedBuffer {
  uint8_t* base = nullptr;
  size_t bytes = 0;
  uint8_t* data() const { return base + kCanaryBytes; }
  void Allocate(size_t n) {
    bytes = n;
    CUDA_OK(cudaMalloc(&base, n + 2 * kCanaryBytes));
    CUDA_OK(cudaMemset(base, kCanaryByte, n + 2 * kCanaryBytes));
  }
  bool CanariesIntact() const {
    std::vector<uint8_t> host(kCanaryBytes);
    for (int side = 0; side < 2; ++side) {
      CUDA_OK(cudaMemcpy(host.data(), side == 0 ? base : base + kCanaryBytes + bytes, kCanaryBytes,
                         cudaMemcpyDeviceToHost));
      for (uint8_t b : host) {
        if (b != kCanaryByte) return false;
      }
    }
    return true;
  }
  void Free() {
    if (base) CUDA_OK(cudaFree(base));
    base = nullptr;
  }
};

// Random head vector: normal values with a per-vector magnitude over several decades, sometimes all zero.
void RandomVector(std::mt19937_64& rng, int d, float* x, bool allow_zero = true, float min_log10 = -3.0f,
                  float max_log10 = 2.0f) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(min_log10, max_log10);
  const float magnitude = std::pow(10.0f, log_mag(rng));
  const bool zero = allow_zero && (rng() % 29 == 0);
  for (int i = 0; i < d; ++i) x[i] = zero ? 0.0f : normal(rng) * magnitude;
}

// CPU: encode x into the page image at (head, token) of K or V.
Status EncodeInto(const PageLayout& layout, const HadamardRotation* rotation, uint8_t* page, int head, int token,
                  bool is_value, const float* x) {
  uint8_t* codes = page + (is_value ? layout.v_codes_offset(head, token) : layout.k_codes_offset(head, token));
  uint8_t* scale = page + (is_value ? layout.v_scale_offset(head, token) : layout.k_scale_offset(head, token));
  switch (layout.format) {
    case KvFormat::kBf16: {
      std::vector<uint16_t> tmp(layout.head_dim);
      MINIMAKV_RETURN_IF_ERROR(Bf16EncodeVector(x, layout.head_dim, tmp.data()));
      std::memcpy(codes, tmp.data(), tmp.size() * 2);
      return Status::Ok();
    }
    case KvFormat::kFp8: {
      float s = 0;
      MINIMAKV_RETURN_IF_ERROR(Fp8EncodeVector(x, layout.head_dim, codes, &s));
      std::memcpy(scale, &s, 4);
      return Status::Ok();
    }
    case KvFormat::kTq3: {
      alignas(4) uint8_t tmp[96];
      uint16_t s = 0;
      MINIMAKV_RETURN_IF_ERROR(Tq3EncodeVector(*rotation, x, tmp, &s));
      std::memcpy(codes, tmp, layout.code_bytes());
      std::memcpy(scale, &s, 2);
      return Status::Ok();
    }
  }
  return Status::Internal("format");
}

// CPU: the exact fp32 values a page slot reconstructs to (original domain).
void DecodeFrom(const PageLayout& layout, const HadamardRotation* rotation, const uint8_t* page, int head,
                int token, bool is_value, float* x) {
  const uint8_t* codes = page + (is_value ? layout.v_codes_offset(head, token) : layout.k_codes_offset(head, token));
  const uint8_t* scale = page + (is_value ? layout.v_scale_offset(head, token) : layout.k_scale_offset(head, token));
  switch (layout.format) {
    case KvFormat::kBf16: {
      std::vector<uint16_t> tmp(layout.head_dim);
      std::memcpy(tmp.data(), codes, tmp.size() * 2);
      Bf16DecodeVector(tmp.data(), layout.head_dim, x);
      return;
    }
    case KvFormat::kFp8: {
      float s;
      std::memcpy(&s, scale, 4);
      Fp8DecodeVector(codes, s, layout.head_dim, x);
      return;
    }
    case KvFormat::kTq3: {
      alignas(4) uint8_t tmp[96];
      std::memcpy(tmp, codes, layout.code_bytes());
      uint16_t s;
      std::memcpy(&s, scale, 2);
      Tq3DecodeVector(*rotation, tmp, s, x);
      return;
    }
  }
}

// Runs fn(0) .. fn(n - 1) on all host cores. The decode cases' host work (drawing and encoding the pages, the fp64
// reference) took ~90% of this program's 3 minutes on one core (session 18: 192 s plain, 236 s under memcheck, of a
// 600 s device call); each index writes only its own outputs.
template <typename Fn>
void ParallelFor(int n, const Fn& fn) {
  const int workers = std::max(1, std::min<int>(n, int(std::thread::hardware_concurrency())));
  std::atomic<int> next{0};
  auto work = [&] {
    for (int i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

size_t FirstMismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return i;
  }
  return a.size();
}

// ------------------------------------------------------------------------------------------------------------
void TestAppend(std::mt19937_64& rng, int head_dim, KvFormat format, CudaInputDtype dtype) {
  PageLayout layout{format, 3, head_dim, 16};
  const int num_pages = 7;
  const int num_tokens = 53;
  const size_t pool_bytes = layout.page_bytes() * num_pages;
  std::vector<uint8_t> expected(pool_bytes, kPoolFill);
  GuardedBuffer pool;
  pool.Allocate(pool_bytes);
  CUDA_OK(cudaMemset(pool.data(), kPoolFill, pool_bytes));

  // Distinct random slots, some rows padding (-1); a second pass with NaN and an out-of-range slot.
  std::vector<int64_t> all_slots(num_pages * layout.page_tokens);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int64_t> slots(num_tokens);
    for (int i = 0; i < num_tokens; ++i) slots[i] = (rng() % 7 == 0) ? -1 : all_slots[pass * num_tokens + i];
    const size_t values = size_t(num_tokens) * layout.kv_heads * head_dim;
    std::vector<float> key(values), value(values);
    for (size_t v = 0; v < values; v += head_dim) {
      RandomVector(rng, head_dim, &key[v]);
      RandomVector(rng, head_dim, &value[v]);
    }
    int bad_row = -1;
    if (pass == 1) {  // one NaN in one V vector, one out-of-range slot
      bad_row = 11;
      value[(size_t(bad_row) * layout.kv_heads + 1) * head_dim + 5] = NAN;
      slots[bad_row] = all_slots[pass * num_tokens + bad_row];
      slots[30] = int64_t(num_pages) * layout.page_tokens + 3;
    }
    // bf16 input: round the floats first, the CPU encodes the same rounded values.
    std::vector<uint16_t> key16(values), value16(values);
    if (dtype == CudaInputDtype::kBf16) {
      for (size_t i = 0; i < values; ++i) {
        key16[i] = FloatToBf16(key[i]);
        value16[i] = std::isnan(value[i]) ? uint16_t(0x7FC0) : FloatToBf16(value[i]);
        key[i] = Bf16ToFloat(key16[i]);
        value[i] = Bf16ToFloat(value16[i]);
      }
    }
    for (int tok = 0; tok < num_tokens; ++tok) {
      if (slots[tok] < 0 || slots[tok] >= int64_t(num_pages) * layout.page_tokens) continue;
      uint8_t* page = expected.data() + size_t(slots[tok] / layout.page_tokens) * layout.page_bytes();
      for (int h = 0; h < layout.kv_heads; ++h) {
        for (int kv = 0; kv < 2; ++kv) {
          const float* x = (kv ? value.data() : key.data()) + (size_t(tok) * layout.kv_heads + h) * head_dim;
          Status s = EncodeInto(layout, nullptr, page, h, int(slots[tok] % layout.page_tokens), kv == 1, x);
          (void)s;  // a NaN vector is rejected by the CPU codec too: nothing written
        }
      }
    }
    const size_t in_bytes = values * (dtype == CudaInputDtype::kBf16 ? 2 : 4);
    void* d_key;
    void* d_value;
    int64_t* d_slots;
    int32_t* d_flag;
    CUDA_OK(cudaMalloc(&d_key, in_bytes));
    CUDA_OK(cudaMalloc(&d_value, in_bytes));
    CUDA_OK(cudaMalloc(&d_slots, slots.size() * 8));
    CUDA_OK(cudaMalloc(&d_flag, 4));
    CUDA_OK(cudaMemcpy(d_key, dtype == CudaInputDtype::kBf16 ? (void*)key16.data() : (void*)key.data(), in_bytes,
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_value, dtype == CudaInputDtype::kBf16 ? (void*)value16.data() : (void*)value.data(),
                       in_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_slots, slots.data(), slots.size() * 8, cudaMemcpyHostToDevice));
    CudaAppendArgs args;
    args.d_key = d_key;
    args.d_value = d_value;
    args.dtype = dtype;
    args.num_tokens = num_tokens;
    args.d_slot_mapping = d_slots;
    args.layout = layout;
    args.d_pages = pool.data();
    args.num_pages = num_pages;
    args.d_error_flag = d_flag;
    STATUS_OK(CudaAppend(args, nullptr));
    Status err = CudaReadAppendError(d_flag, nullptr);
    if (pass == 0) {
      CHECK(err.ok(), "append pass 0 reported %s", err.ToString().c_str());
    } else {
      CHECK(!err.ok(), "append with NaN / bad slot reported OK");
    }
    std::vector<uint8_t> got(pool_bytes);
    CUDA_OK(cudaMemcpy(got.data(), pool.data(), pool_bytes, cudaMemcpyDeviceToHost));
    const size_t mismatch = FirstMismatch(got, expected);
    CHECK(mismatch == pool_bytes, "append d=%d %s %s pass %d: first differing pool byte %zu (got %02x want %02x)",
          head_dim, std::string(KvFormatName(format)).c_str(), dtype == CudaInputDtype::kBf16 ? "bf16" : "fp32",
          pass, mismatch, mismatch < pool_bytes ? got[mismatch] : 0, mismatch < pool_bytes ? expected[mismatch] : 0);
    CUDA_OK(cudaFree(d_key));
    CUDA_OK(cudaFree(d_value));
    CUDA_OK(cudaFree(d_slots));
    CUDA_OK(cudaFree(d_flag));
  }
  CHECK(pool.CanariesIntact(), "append wrote outside the pool");
  pool.Free();
}

// ------------------------------------------------------------------------------------------------------------
void TestConvert(std::mt19937_64& rng, int head_dim, int page_tokens) {
  const uint64_t seed = HadamardRotation::kDefaultSeed ^ rng();
  HadamardRotation rotation;
  STATUS_OK(HadamardRotation::Create(head_dim, seed, &rotation));
  PageLayout fp8{KvFormat::kFp8, 2, head_dim, page_tokens};
  PageLayout tq3{KvFormat::kTq3, 2, head_dim, page_tokens};
  const int fp8_pages = 9;
  const int tq3_pages = 11;
  std::vector<uint8_t> fp8_image(fp8.page_bytes() * fp8_pages, 0);
  std::vector<float> x(head_dim);
  for (int p = 0; p < fp8_pages; ++p) {
    for (int tok = 0; tok < page_tokens; ++tok) {
      for (int h = 0; h < fp8.kv_heads; ++h) {
        for (int kv = 0; kv < 2; ++kv) {
          RandomVector(rng, head_dim, x.data());
          STATUS_OK(EncodeInto(fp8, nullptr, fp8_image.data() + p * fp8.page_bytes(), h, tok, kv == 1, x.data()));
        }
      }
    }
  }
  // Pairs: shuffled sources and destinations, partly filled pages.
  std::vector<int> src(fp8_pages), dst(tq3_pages);
  std::iota(src.begin(), src.end(), 0);
  std::iota(dst.begin(), dst.end(), 0);
  std::shuffle(src.begin(), src.end(), rng);
  std::shuffle(dst.begin(), dst.end(), rng);
  std::vector<CudaConvertPair> pairs;
  for (int i = 0; i < 7; ++i) {
    const int tokens = i % 3 == 0 ? int(1 + rng() % page_tokens) : page_tokens;
    pairs.push_back({src[i], dst[i], tokens});
  }
  std::vector<uint8_t> expected(tq3.page_bytes() * tq3_pages, kPoolFill);
  for (const CudaConvertPair& pr : pairs) {
    uint8_t* out_page = expected.data() + pr.dst_page * tq3.page_bytes();
    const uint8_t* in_page = fp8_image.data() + pr.src_page * fp8.page_bytes();
    for (int tok = 0; tok < page_tokens; ++tok) {
      for (int h = 0; h < tq3.kv_heads; ++h) {
        for (int kv = 0; kv < 2; ++kv) {
          if (tok < pr.tokens) {
            DecodeFrom(fp8, nullptr, in_page, h, tok, kv == 1, x.data());
          } else {
            std::fill(x.begin(), x.end(), 0.0f);
          }
          STATUS_OK(EncodeInto(tq3, &rotation, out_page, h, tok, kv == 1, x.data()));
        }
      }
    }
    // The padding bytes between the payload and the page end stay untouched.
  }
  uint8_t* d_fp8;
  CUDA_OK(cudaMalloc(&d_fp8, fp8_image.size()));
  CUDA_OK(cudaMemcpy(d_fp8, fp8_image.data(), fp8_image.size(), cudaMemcpyHostToDevice));
  GuardedBuffer d_tq3;
  d_tq3.Allocate(expected.size());
  CUDA_OK(cudaMemset(d_tq3.data(), kPoolFill, expected.size()));
  CudaConvertPair* d_pairs;
  int32_t* d_flag;
  CUDA_OK(cudaMalloc(&d_pairs, pairs.size() * sizeof(CudaConvertPair)));
  CUDA_OK(cudaMalloc(&d_flag, 4));
  CUDA_OK(cudaMemcpy(d_pairs, pairs.data(), pairs.size() * sizeof(CudaConvertPair), cudaMemcpyHostToDevice));
  CudaConvertArgs args;
  args.fp8_layout = fp8;
  args.tq3_layout = tq3;
  args.d_fp8_pages = d_fp8;
  args.d_tq3_pages = d_tq3.data();
  args.d_pairs = d_pairs;
  args.num_pairs = int(pairs.size());
  args.fp8_num_pages = fp8_pages;
  args.tq3_num_pages = tq3_pages;
  args.rotation_seed = seed;
  args.d_error_flag = d_flag;
  STATUS_OK(CudaConvertFp8ToTq3(args, nullptr));
  Status err = CudaReadAppendError(d_flag, nullptr);
  CHECK(err.ok(), "convert reported %s", err.ToString().c_str());
  std::vector<uint8_t> got(expected.size());
  CUDA_OK(cudaMemcpy(got.data(), d_tq3.data(), got.size(), cudaMemcpyDeviceToHost));
  const size_t mismatch = FirstMismatch(got, expected);
  CHECK(mismatch == got.size(), "convert d=%d page_tokens=%d: first differing byte %zu of %zu (page %zu)", head_dim,
        page_tokens, mismatch, got.size(), mismatch / tq3.page_bytes());
  CHECK(d_tq3.CanariesIntact(), "convert wrote outside the TQ3 pool");

  // Session 16: pairs are device data, checked by the kernel. A bad pair between two good ones: the flag names it
  // (pair 1), nothing of it is written (a bad pair with an in-range destination leaves that page untouched), the
  // good ones convert as before. The pool sizes are required on the host.
  const CudaConvertPair bad_pairs[] = {{-1, dst[8], page_tokens},         {fp8_pages, dst[8], page_tokens},
                                       {src[8], -2, page_tokens},         {src[8], tq3_pages, page_tokens},
                                       {src[8], dst[8], 0},               {src[8], dst[8], page_tokens + 1},
                                       {src[8], 1 << 30, page_tokens}};
  for (const CudaConvertPair& bad : bad_pairs) {
    const CudaConvertPair three[3] = {pairs[0], bad, pairs[1]};
    CUDA_OK(cudaMemcpy(d_pairs, three, sizeof three, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_tq3.data(), kPoolFill, expected.size()));
    args.num_pairs = 3;
    STATUS_OK(CudaConvertFp8ToTq3(args, nullptr));
    const Status rejected = CudaReadAppendError(d_flag, nullptr);
    CHECK(!rejected.ok() && rejected.message().find("pair 1 ") != std::string::npos,
          "convert d=%d bad pair (%d, %d, %d): flag gave \"%s\"", head_dim, bad.src_page, bad.dst_page, bad.tokens,
          rejected.ToString().c_str());
    CUDA_OK(cudaMemcpy(got.data(), d_tq3.data(), got.size(), cudaMemcpyDeviceToHost));
    for (int page = 0; page < tq3_pages; ++page) {
      const bool good = page == pairs[0].dst_page || page == pairs[1].dst_page;
      bool same = true;
      for (size_t b = 0; b < tq3.page_bytes(); ++b) {
        const size_t at = size_t(page) * tq3.page_bytes() + b;
        same = same && got[at] == (good ? expected[at] : kPoolFill);
      }
      CHECK(same, "convert d=%d bad pair (%d, %d, %d): page %d %s", head_dim, bad.src_page, bad.dst_page, bad.tokens,
            page, good ? "differs from the CPU codec" : "was written");
    }
    CHECK(d_tq3.CanariesIntact(), "convert with a bad pair wrote outside the TQ3 pool");
  }
  CudaConvertArgs unsized = args;
  unsized.fp8_num_pages = 0;
  const Status refused = CudaConvertFp8ToTq3(unsized, nullptr);
  CHECK(!refused.ok() && refused.message().find("fp8_num_pages 0") != std::string::npos,
        "convert without the fp8 pool size: %s", refused.ToString().c_str());
  CUDA_OK(cudaFree(d_fp8));
  CUDA_OK(cudaFree(d_pairs));
  CUDA_OK(cudaFree(d_flag));
  d_tq3.Free();
}

// ------------------------------------------------------------------------------------------------------------
struct HostView {
  PageLayout layout;
  int num_pages = 0;
  std::vector<uint8_t> image;
  std::vector<int32_t> indptr, ids, last;
  // device
  uint8_t* d_pages = nullptr;
  int32_t *d_indptr = nullptr, *d_ids = nullptr, *d_last = nullptr;
};

struct DecodeCase {
  int num_q_heads, kv_heads, head_dim, page_tokens;
  std::vector<KvFormat> formats;
  int sm_count;  // 0 = the device's
  CudaTq3Ctas tq3_ctas = CudaTq3Ctas::kAuto;  // v23: main runs the TQ3 d = 128 cases both narrow and wide
  int query_tokens = 1;                         // session 16: query tokens per sequence
};

// fixed_tokens (v20): tokens per sequence of every format instead of the random mix (rows split over many items).
void TestDecode(std::mt19937_64& rng, const DecodeCase& c, int num_seqs, const std::vector<int>* fixed_tokens = nullptr) {
  const int d = c.head_dim;
  const int group = c.num_q_heads / c.kv_heads;
  const int tokens_per_seq = c.query_tokens;
  const int row_group = group * tokens_per_seq;  // query rows per KV head, as the plan counts them
  const uint64_t seed = rng();
  HadamardRotation rotation;
  STATUS_OK(HadamardRotation::Create(d, seed, &rotation));
  const float sm_scale = 1.0f / std::sqrt(float(d));
  std::string name = "decode q" + std::to_string(c.num_q_heads) + "/kv" + std::to_string(c.kv_heads) + " d" +
                     std::to_string(d) + " pt" + std::to_string(c.page_tokens) + " sm" + std::to_string(c.sm_count) +
                     " [";
  for (KvFormat f : c.formats) name += std::string(KvFormatName(f)) + " ";
  name += "]";
  if (c.tq3_ctas != CudaTq3Ctas::kAuto) {
    name += c.tq3_ctas == CudaTq3Ctas::kWide ? " wide" : c.tq3_ctas == CudaTq3Ctas::kPaired ? " paired" : " narrow";
  }
  if (tokens_per_seq > 1) name += " T" + std::to_string(tokens_per_seq);

  // Per sequence and format: token counts (some empty, odd, partial pages, one long).
  std::vector<std::vector<int>> tokens(c.formats.size(), std::vector<int>(num_seqs));
  for (size_t f = 0; f < c.formats.size(); ++f) {
    for (int s = 0; s < num_seqs; ++s) {
      const int kind = int(rng() % 6);
      tokens[f][s] = kind == 0 ? 0 : kind == 1 ? int(1 + rng() % 15) : kind == 5 ? int(1500 + rng() % 1700)
                                                                                : int(1 + rng() % 400);
    }
  }
  if (num_seqs > 1) {
    for (size_t f = 0; f < c.formats.size(); ++f) tokens[f][1] = 0;  // a sequence with no cached token at all
  }
  if (fixed_tokens != nullptr) {
    for (size_t f = 0; f < c.formats.size(); ++f) tokens[f] = *fixed_tokens;
    name += " fixed";
  }
  std::vector<HostView> views(c.formats.size());
  // Each page draws its K/V from its own engine, seeded from rng in a fixed order, so the pages are the same whatever
  // the number of host threads that fill them.
  struct PageFill {
    int view;          // index into views
    int page_id;       // physical page in the view's image
    int valid_tokens;  // tokens on this page (the last page of a sequence may be partly filled)
    uint64_t seed;
  };
  std::vector<PageFill> fills;
  for (size_t f = 0; f < c.formats.size(); ++f) {
    HostView& v = views[f];
    v.layout = PageLayout{c.formats[f], c.kv_heads, d, c.page_tokens};
    int pages_needed = 0;
    for (int s = 0; s < num_seqs; ++s) pages_needed += (tokens[f][s] + c.page_tokens - 1) / c.page_tokens;
    v.num_pages = pages_needed + 5;
    v.image.assign(v.layout.page_bytes() * v.num_pages, kPoolFill);
    std::vector<int32_t> free_ids(v.num_pages);
    std::iota(free_ids.begin(), free_ids.end(), 0);
    std::shuffle(free_ids.begin(), free_ids.end(), rng);
    v.indptr.assign(1, 0);
    int next = 0;
    for (int s = 0; s < num_seqs; ++s) {
      const int n = tokens[f][s];
      const int pages = (n + c.page_tokens - 1) / c.page_tokens;
      for (int p = 0; p < pages; ++p) {
        const int valid = p == pages - 1 ? n - p * c.page_tokens : c.page_tokens;
        const int32_t id = free_ids[next++];
        fills.push_back({int(f), id, valid, rng()});
        v.ids.push_back(id);
      }
      v.indptr.push_back(int32_t(v.ids.size()));
      v.last.push_back(n == 0 ? 0 : n - (pages - 1) * c.page_tokens);
    }
  }
  // Each fill writes its own page's bytes.
  ParallelFor(int(fills.size()), [&](int index) {
    const PageFill& fill = fills[size_t(index)];
    HostView& v = views[size_t(fill.view)];
    uint8_t* page = v.image.data() + size_t(fill.page_id) * v.layout.page_bytes();
    std::mt19937_64 fill_rng(fill.seed);
    std::vector<float> x(d);
    for (int tok = 0; tok < fill.valid_tokens; ++tok) {
      for (int h = 0; h < c.kv_heads; ++h) {
        for (int kv = 0; kv < 2; ++kv) {
          // Per-token magnitudes over 3 decades (1e-2 .. 10): attention logits up to a few tens.
          RandomVector(fill_rng, d, x.data(), true, -2.0f, 1.0f);
          STATUS_OK(EncodeInto(v.layout, &rotation, page, h, tok, kv == 1, x.data()));
        }
      }
    }
  });
  for (HostView& v : views) {
    CUDA_OK(cudaMalloc(&v.d_pages, v.image.size()));
    CUDA_OK(cudaMemcpy(v.d_pages, v.image.data(), v.image.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMalloc(&v.d_indptr, v.indptr.size() * 4));
    CUDA_OK(cudaMalloc(&v.d_ids, std::max<size_t>(1, v.ids.size()) * 4));
    CUDA_OK(cudaMalloc(&v.d_last, std::max<size_t>(1, v.last.size()) * 4));
    CUDA_OK(cudaMemcpy(v.d_indptr, v.indptr.data(), v.indptr.size() * 4, cudaMemcpyHostToDevice));
    if (!v.ids.empty()) CUDA_OK(cudaMemcpy(v.d_ids, v.ids.data(), v.ids.size() * 4, cudaMemcpyHostToDevice));
    if (!v.last.empty()) CUDA_OK(cudaMemcpy(v.d_last, v.last.data(), v.last.size() * 4, cudaMemcpyHostToDevice));
  }
  // Queries: normal, scaled so softmax is peaked for some heads and flat for others.
  const size_t q_rows = size_t(num_seqs) * tokens_per_seq * c.num_q_heads;  // [seq][token][head]
  const size_t q_count = q_rows * d;
  std::vector<float> q(q_count);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t row = 0; row < q_count / d; ++row) {
    const float gain = (row % 3 == 0) ? 3.0f : (row % 3 == 1) ? 1.0f : 0.3f;
    for (int i = 0; i < d; ++i) q[row * d + i] = normal(rng) * gain;
  }

  // Plan, upload, run (eager), then capture the run in a CUDA graph and replay it.
  int sm_count = c.sm_count;
  if (sm_count == 0) CUDA_OK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  CudaDecodeShape shape{num_seqs, c.num_q_heads, c.kv_heads, d, sm_scale, seed, c.tq3_ctas, tokens_per_seq};
  std::vector<CudaViewLengths> lengths;
  std::vector<PagedKvView> dviews;
  for (HostView& v : views) {
    lengths.push_back({v.layout.format, c.page_tokens, v.indptr.data(), v.last.data()});
    PagedKvView pv;
    pv.layout = v.layout;
    pv.pages = v.d_pages;
    pv.num_seqs = num_seqs;
    pv.page_indptr = v.d_indptr;
    pv.page_ids = v.d_ids;
    pv.last_page_tokens = v.d_last;
    dviews.push_back(pv);
  }
  CudaDecodePlan plan;
  STATUS_OK(CudaDecodePlan::Create(shape, lengths.data(), int(lengths.size()), sm_count, &plan));
  for (int v = 0; v < plan.num_views(); ++v) {  // a forced CTA shape is taken where the wide kernel exists
    const bool wide_exists = plan.view_format(v) == KvFormat::kTq3 && d == 128 && plan.cta_heads(v) <= 8;
    if (c.tq3_ctas != CudaTq3Ctas::kAuto) {
      CHECK(plan.wide_ctas(v) == (wide_exists && c.tq3_ctas == CudaTq3Ctas::kWide), "%s: view %d wide_ctas %d",
            name.c_str(), v, int(plan.wide_ctas(v)));
    }
    CHECK(wide_exists || !plan.wide_ctas(v), "%s: view %d wide without a wide kernel", name.c_str(), v);
    // v27: paired CTAs (two KV heads of head_dim 128 per CTA) where the group is 4 (session 15: 1-4) and the KV heads
    // even; the plan's default there, forced by kPaired, never with another forced shape.
    const bool paired_exists =
        plan.view_format(v) == KvFormat::kTq3 && (d == 128 || d == 64) && row_group <= 4 && c.kv_heads % 2 == 0;
    const bool paired_wanted = c.tq3_ctas == CudaTq3Ctas::kAuto || c.tq3_ctas == CudaTq3Ctas::kPaired;
    CHECK(plan.paired_ctas(v) == (paired_exists && paired_wanted), "%s: view %d paired_ctas %d", name.c_str(), v,
          int(plan.paired_ctas(v)));
  }
  GuardedBuffer ws, out, lse;
  ws.Allocate(plan.workspace_bytes());
  out.Allocate(q_count * 4);
  lse.Allocate(q_rows * 4);
  CUDA_OK(cudaMemset(out.data(), 0xFF, q_count * 4));  // NaN poison: every element must be written
  CUDA_OK(cudaMemset(lse.data(), 0xFF, q_rows * 4));
  float* d_q;
  CUDA_OK(cudaMalloc(&d_q, q_count * 4));
  CUDA_OK(cudaMemcpy(d_q, q.data(), q_count * 4, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  STATUS_OK(plan.Upload(ws.data(), stream));
  PartialStatesOut states{reinterpret_cast<float*>(out.data()), reinterpret_cast<float*>(lse.data())};
  STATUS_OK(CudaDecodeRun(plan, dviews.data(), int(dviews.size()), d_q, ws.data(), states, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<float> got(q_count), got_lse(q_rows);
  CUDA_OK(cudaMemcpy(got.data(), out.data(), q_count * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got_lse.data(), lse.data(), got_lse.size() * 4, cudaMemcpyDeviceToHost));

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaMemsetAsync(out.data(), 0xFF, q_count * 4, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  STATUS_OK(CudaDecodeRun(plan, dviews.data(), int(dviews.size()), d_q, ws.data(), states, stream));
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<float> replay(q_count);
  CUDA_OK(cudaMemcpy(replay.data(), out.data(), q_count * 4, cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(replay.data(), got.data(), q_count * 4) == 0, "%s: graph replay differs from eager run",
        name.c_str());
  // v19: repeated steps in one stream (graph replays back to back, then eager runs), the output poisoned before
  // each: every step must redo all the work, so no state may carry from one step to the next; outputs and LSEs
  // bit-identical. Session 14: the last step runs the two halves, CudaDecodePartials then CudaDecodeMerge (ordinary
  // launches), which must give the same bits as CudaDecodeRun. Session 15: the partial-state region is poisoned
  // before every step too, so a merge that read states before this step's partial CTAs wrote them (a step counter
  // not reset by the previous step, MINIMAKV_MERGE_COUNTER) would read NaN.
  constexpr int kRepeatedSteps = 3;
  std::vector<float> again(q_count), again_lse(got_lse.size());
  for (int step = 0; step <= 2 * kRepeatedSteps + 1; ++step) {  // (the last: an eager run after the two halves)
    CUDA_OK(cudaMemsetAsync(out.data(), 0xFF, q_count * 4, stream));
    CUDA_OK(cudaMemsetAsync(lse.data(), 0xFF, got_lse.size() * 4, stream));
    CUDA_OK(cudaMemsetAsync(ws.data() + plan.meta_bytes(), 0xFF, plan.workspace_bytes() - plan.meta_bytes(), stream));
    const bool halves = step == 2 * kRepeatedSteps;
    const char* kind = step < kRepeatedSteps ? "graph replay" : halves ? "two halves" : "eager";
    if (step < kRepeatedSteps) {
      CUDA_OK(cudaGraphLaunch(exec, stream));
    } else if (!halves) {
      STATUS_OK(CudaDecodeRun(plan, dviews.data(), int(dviews.size()), d_q, ws.data(), states, stream));
    } else {
      STATUS_OK(CudaDecodePartials(plan, dviews.data(), int(dviews.size()), d_q, ws.data(), stream));
      STATUS_OK(CudaDecodeMerge(plan, ws.data(), states, stream));
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(again.data(), out.data(), q_count * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(again_lse.data(), lse.data(), got_lse.size() * 4, cudaMemcpyDeviceToHost));
    CHECK(std::memcmp(again.data(), got.data(), q_count * 4) == 0 &&
              std::memcmp(again_lse.data(), got_lse.data(), got_lse.size() * 4) == 0,
          "%s: repeated step %d (%s) differs from the first eager run", name.c_str(), step, kind);
  }
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));

  // fp64 reference over the same dequantized pages (the repeated steps above are bit-identical to this run), one
  // (sequence, KV head) per task; the tasks' sums are added in task order, so the figures do not depend on threads.
  struct RowStats {
    double err2 = 0.0, ref2 = 0.0, worst_row = 0.0, worst_lse = 0.0;
    int nonfinite = 0;
    int empty_rows = 0;      // query rows of a sequence with no cached token: output zero, LSE -inf
    int bad_empty_row = -1;  // the first of them that is not
  };
  std::vector<RowStats> task_stats(size_t(num_seqs) * c.kv_heads);
  ParallelFor(int(task_stats.size()), [&](int task) {
    const int s = task / c.kv_heads;
    const int kh = task % c.kv_heads;
    RowStats& st = task_stats[task];
    // Gather this sequence's dequantized K, V of this KV head (all formats).
    std::vector<std::vector<float>> keys, vals;
    for (const HostView& v : views) {
      for (int pi = v.indptr[s]; pi < v.indptr[s + 1]; ++pi) {
        const int valid = pi == v.indptr[s + 1] - 1 ? v.last[s] : c.page_tokens;
        const uint8_t* page = v.image.data() + size_t(v.ids[pi]) * v.layout.page_bytes();
        for (int tok = 0; tok < valid; ++tok) {
          keys.emplace_back(d);
          vals.emplace_back(d);
          DecodeFrom(v.layout, &rotation, page, kh, tok, false, keys.back().data());
          DecodeFrom(v.layout, &rotation, page, kh, tok, true, vals.back().data());
        }
      }
    }
    std::vector<double> ref(d), score(keys.size());
    for (int qr_index = 0; qr_index < row_group; ++qr_index) {
      const int t = qr_index / group;
      const int h = kh * group + qr_index % group;
      const size_t row = (size_t(s) * tokens_per_seq + t) * c.num_q_heads + h;
      const float* qr = &q[row * d];
      const float* gr = &got[row * d];
      const float gl = got_lse[row];
      for (int i = 0; i < d; ++i) st.nonfinite += !std::isfinite(gr[i]);
      if (keys.empty()) {
        ++st.empty_rows;
        bool zero = true;
        for (int i = 0; i < d; ++i) zero = zero && gr[i] == 0.0f;
        if (!(zero && gl == -INFINITY) && st.bad_empty_row < 0) st.bad_empty_row = int(row);
        continue;
      }
      double mx = -INFINITY;
      for (size_t k = 0; k < keys.size(); ++k) {
        double dot = 0.0;
        for (int i = 0; i < d; ++i) dot += double(qr[i]) * keys[k][i];
        score[k] = dot * sm_scale;
        mx = std::max(mx, score[k]);
      }
      double sum = 0.0;
      double row_scale2 = 0.0;  // sum_k p_k |v_k|^2: the natural scale of a convex combination of the v_k
      std::fill(ref.begin(), ref.end(), 0.0);
      for (size_t k = 0; k < keys.size(); ++k) {
        const double w = std::exp(score[k] - mx);
        sum += w;
        for (int i = 0; i < d; ++i) {
          ref[i] += w * vals[k][i];
          row_scale2 += w * double(vals[k][i]) * vals[k][i];
        }
      }
      double row_err = 0.0, row_ref = 0.0;
      for (int i = 0; i < d; ++i) {
        ref[i] /= sum;
        row_err += (gr[i] - ref[i]) * (gr[i] - ref[i]);
        row_ref += ref[i] * ref[i];
      }
      row_scale2 /= sum;
      st.err2 += row_err;
      st.ref2 += row_ref;
      if (row_scale2 > 0) st.worst_row = std::max(st.worst_row, std::sqrt(row_err / row_scale2));
      const double ref_lse = (mx + std::log(sum)) / std::log(2.0);
      st.worst_lse = std::max(st.worst_lse, std::fabs(gl - ref_lse) / std::max(1.0, std::fabs(ref_lse)));
    }
  });
  double err2 = 0.0, ref2 = 0.0, worst_row = 0.0, worst_lse = 0.0;
  int nonfinite = 0;
  for (const RowStats& st : task_stats) {
    err2 += st.err2;
    ref2 += st.ref2;
    worst_row = std::max(worst_row, st.worst_row);
    worst_lse = std::max(worst_lse, st.worst_lse);
    nonfinite += st.nonfinite;
    if (st.empty_rows > 0) {
      const size_t row = size_t(std::max(0, st.bad_empty_row));
      CHECK(st.bad_empty_row < 0, "%s: empty sequence, query row %zu: lse %g, out not zero", name.c_str(), row,
            got_lse[row]);
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
  CHECK(nonfinite == 0, "%s: %d non-finite outputs", name.c_str(), nonfinite);
  CHECK(rel <= 1e-3, "%s: relative L2 %.3g > 1e-3", name.c_str(), rel);
  CHECK(worst_row <= 1e-3, "%s: worst row error / sqrt(sum p |v|^2) %.3g > 1e-3", name.c_str(), worst_row);
  // TQ3 key scores use the query as a per-head 24-bit fixed point (cuda_attention.cu, v9 / v15: the key units of
  // tq3_codec.h are exact int8), so a score is off by up to ~2^-24 max|q| sum|unit| / alpha; the test's nearly
  // orthogonal q and k keep the LSE small, so the relative LSE error shows it. Measured (v15, 01:07 UTC): <= 1.0e-6
  // for every set without BF16 (v9-v14, when the keys' "lo x q0" digit product was dropped: TQ3 4.4e-6 to 1.9e-5
  // in 7 of the 8 TQ3-only cases), BF16 sets up to 1.4e-5 (its split hi + lo query). Session 9 (10005 checks, the
  // random draws shifted by the added wide-CTA cases): one [fp8 tq3] case at d 64, group 9 reached 4.0e-6 (its FP8
  // and TQ3 kernels PTX-identical to session 8's; the next largest of 124 sets without BF16: 1.6e-6, median 3.5e-7),
  // so the bound went from 4e-6 to 8e-6.
  const bool has_bf16 = std::find(c.formats.begin(), c.formats.end(), KvFormat::kBf16) != c.formats.end();
  // BF16 sets: the query's hi + lo bf16 split keeps ~16 bits, so the bound depends on the draw (v27 saw 1.7e-4 at
  // q26/kv2 d 128 when added cases shifted the draws; session 16 5.1e-5 at q16/kv2 d 128 with 8 query tokens, the
  // kernels of a group of 64): 2e-4.
  const double lse_bound = has_bf16 ? 2e-4 : 8e-6;
  CHECK(worst_lse <= lse_bound, "%s: worst lse relative error %.3g > %.0e", name.c_str(), worst_lse, lse_bound);
  CHECK(ws.CanariesIntact() && out.CanariesIntact() && lse.CanariesIntact(), "%s: canary overwritten",
        name.c_str());
  std::printf("  %-58s items %4d  rel L2 %.2e  worst row %.2e  lse %.1e\n", name.c_str(), plan.total_items(), rel,
              worst_row, worst_lse);

  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(d_q));
  ws.Free();
  out.Free();
  lse.Free();
  for (HostView& v : views) {
    CUDA_OK(cudaFree(v.d_pages));
    CUDA_OK(cudaFree(v.d_indptr));
    CUDA_OK(cudaFree(v.d_ids));
    CUDA_OK(cudaFree(v.d_last));
  }
}

// A refused shape: Create fails and its message names the bad value.
void CheckRefused(const CudaDecodeShape& shape, const CudaViewLengths& view, const std::string& value,
                  const char* what) {
  CudaDecodePlan plan;
  const Status status = CudaDecodePlan::Create(shape, &view, 1, 132, &plan);
  CHECK(!status.ok(), "%s accepted", what);
  CHECK(status.message().find(value) != std::string::npos, "%s: message \"%s\" does not name %s", what,
        status.message().c_str(), value.c_str());
}

void TestPlanErrors() {
  const int32_t indptr[2] = {0, 1};
  const int32_t last[1] = {16};
  CudaViewLengths view{KvFormat::kFp8, 16, indptr, last};
  CudaDecodePlan plan;
  // head_dim 64 / 128 / 256 (v16: 64 too); others refused.
  CheckRefused({1, 24, 4, 96, 0.1f, 0}, view, "96", "head_dim 96");
  CheckRefused({1, 24, 4, 32, 0.1f, 0}, view, "32", "head_dim 32");
  CHECK(CudaDecodePlan::Create({1, 24, 4, 64, 0.125f, 0}, &view, 1, 132, &plan).ok(), "head_dim 64 refused");
  // Groups > 8 are head tiles since v16 (any group up to 64); refused: q heads not a multiple of kv heads, group > 64.
  CheckRefused({1, 36, 8, 128, 0.1f, 0}, view, "36", "num_q_heads 36 / kv_heads 8");
  CheckRefused({1, 130, 2, 128, 0.1f, 0}, view, "65", "group 65");
  // Session 16: query tokens per sequence >= 1, and rows per KV head (group x tokens) at most 64.
  CheckRefused({1, 32, 8, 128, 0.1f, 0, CudaTq3Ctas::kAuto, 0}, view, "query_tokens 0", "query_tokens 0");
  CheckRefused({1, 32, 8, 128, 0.1f, 0, CudaTq3Ctas::kAuto, -3}, view, "query_tokens -3", "query_tokens -3");
  CheckRefused({1, 32, 8, 128, 0.1f, 0, CudaTq3Ctas::kAuto, 17}, view, "68", "group 4 x 17 tokens");
  CheckRefused({1, 32, 8, 128, 0.1f, 0, CudaTq3Ctas::kAuto, 1 << 30}, view, "query_tokens 1073741824",
               "query_tokens 2^30 (no int overflow)");
  // The launches' int products: more than 1024 KV heads, or 2^31 query rows, are refused (names the values).
  CheckRefused({1, 2048, 2048, 128, 0.1f, 0}, view, "kv_heads 2048", "kv_heads 2048");
  CheckRefused({1 << 23, 64, 8, 128, 0.1f, 0, CudaTq3Ctas::kAuto, 8}, view, "num_seqs 8388608",
               "2^23 seqs x 64 heads x 8 tokens = 2^32 query rows");
  CHECK(CudaDecodePlan::Create({1, 32, 8, 128, 0.1f, 0, CudaTq3Ctas::kAuto, 16}, &view, 1, 132, &plan).ok() &&
            plan.rows_per_seq() == 512 && plan.head_ctas(0) == 4 && plan.cta_heads(0) == 16,
        "group 4 x 16 tokens: 64 rows per KV head in 4 CTAs of 16 expected");
  // v17: BF16 (every head_dim) and FP8 / TQ3 at head_dim 64 / 128 take up to 16 query heads per CTA (two MMA head
  // tiles, one K / V read); FP8 / TQ3 at head_dim 256 take 8. A KV head's group is split into near-equal CTAs.
  auto check_split = [&](const CudaDecodeShape& shape, KvFormat format, int ctas, int heads) {
    CudaViewLengths v{format, 16, indptr, last};
    const bool ok = CudaDecodePlan::Create(shape, &v, 1, 132, &plan).ok();
    CHECK(ok && plan.head_ctas(0) == ctas && plan.cta_heads(0) == heads,
          "q%d/kv%d d%d format %d: %s, %d CTAs of %d heads per KV head (expected %d of %d)", shape.num_q_heads,
          shape.kv_heads, shape.head_dim, int(format), ok ? "planned" : "refused", ok ? plan.head_ctas(0) : 0,
          ok ? plan.cta_heads(0) : 0, ctas, heads);
  };
  check_split({1, 36, 4, 128, 0.1f, 0}, KvFormat::kFp8, 1, 9);
  check_split({1, 36, 4, 128, 0.1f, 0}, KvFormat::kTq3, 1, 9);
  check_split({1, 36, 4, 128, 0.1f, 0}, KvFormat::kBf16, 1, 9);
  check_split({1, 64, 4, 256, 0.1f, 0}, KvFormat::kBf16, 1, 16);
  check_split({1, 36, 4, 256, 0.1f, 0}, KvFormat::kTq3, 2, 5);
  check_split({1, 64, 4, 64, 0.1f, 0}, KvFormat::kTq3, 1, 16);
  check_split({1, 17, 1, 128, 0.1f, 0}, KvFormat::kFp8, 2, 9);
  check_split({1, 48, 2, 128, 0.1f, 0}, KvFormat::kTq3, 2, 12);
  check_split({1, 64, 1, 128, 0.1f, 0}, KvFormat::kFp8, 4, 16);
  check_split({1, 64, 1, 128, 0.1f, 0}, KvFormat::kBf16, 4, 16);
  check_split({1, 64, 1, 256, 0.1f, 0}, KvFormat::kFp8, 8, 8);
  check_split({1, 32, 8, 128, 0.1f, 0}, KvFormat::kTq3, 1, 4);
  // v23: kAuto takes the wide TQ3 kernel (d = 128, groups <= 8) with at least sm_count / 4 (sequence, KV head) rows.
  auto check_wide = [&](int num_seqs, int kv_heads, int head_dim, KvFormat format, bool expected) {
    std::vector<int32_t> seq_indptr(size_t(num_seqs) + 1), seq_last(size_t(num_seqs), 16);
    for (int s = 0; s <= num_seqs; ++s) seq_indptr[size_t(s)] = 4 * s;
    CudaViewLengths v{format, 16, seq_indptr.data(), seq_last.data()};
    // (groups of 6: groups of 1-4 over an even number of KV heads take paired CTAs, v27 / session 15)
    const bool ok = CudaDecodePlan::Create({num_seqs, 6 * kv_heads, kv_heads, head_dim, 0.1f, 0}, &v, 1, 132, &plan).ok();
    CHECK(ok && plan.wide_ctas(0) == expected, "%d seqs x %d KV heads d%d format %d: wide %d (expected %d)", num_seqs,
          kv_heads, head_dim, int(format), ok ? int(plan.wide_ctas(0)) : -1, int(expected));
  };
  check_wide(8, 8, 128, KvFormat::kTq3, true);    // 64 rows >= 33
  check_wide(4, 8, 128, KvFormat::kTq3, false);   // 32 rows
  check_wide(1, 8, 128, KvFormat::kTq3, false);
  check_wide(32, 8, 128, KvFormat::kTq3, true);
  check_wide(8, 8, 128, KvFormat::kFp8, false);   // TQ3 only
  check_wide(32, 4, 256, KvFormat::kTq3, false);  // d = 128 only
  // v27: kAuto takes paired CTAs for TQ3 at d = 128 with groups of 4 and an even number of KV heads, at any batch.
  auto check_paired = [&](int num_seqs, int num_q_heads, int kv_heads, int head_dim, KvFormat format, bool expected) {
    std::vector<int32_t> seq_indptr(size_t(num_seqs) + 1), seq_last(size_t(num_seqs), 16);
    for (int s = 0; s <= num_seqs; ++s) seq_indptr[size_t(s)] = 4 * s;
    CudaViewLengths v{format, 16, seq_indptr.data(), seq_last.data()};
    const bool ok =
        CudaDecodePlan::Create({num_seqs, num_q_heads, kv_heads, head_dim, 0.1f, 0}, &v, 1, 132, &plan).ok();
    CHECK(ok && plan.paired_ctas(0) == expected && !(plan.paired_ctas(0) && plan.wide_ctas(0)),
          "%d seqs q%d/kv%d d%d format %d: paired %d (expected %d)", num_seqs, num_q_heads, kv_heads, head_dim,
          int(format), ok ? int(plan.paired_ctas(0)) : -1, int(expected));
  };
  check_paired(1, 32, 8, 128, KvFormat::kTq3, true);
  check_paired(32, 32, 8, 128, KvFormat::kTq3, true);
  check_paired(8, 12, 3, 128, KvFormat::kTq3, false);  // odd KV heads
  check_paired(8, 64, 8, 128, KvFormat::kTq3, false);  // group 8 fills the MMA columns already
  check_paired(8, 32, 8, 128, KvFormat::kFp8, false);  // TQ3 only
  check_paired(8, 16, 4, 256, KvFormat::kTq3, false);  // d = 128 and (v28) 64 only
  check_paired(8, 32, 8, 64, KvFormat::kTq3, true);    // v28: d = 64 through the d = 128 kernel
  check_paired(1, 8, 2, 64, KvFormat::kTq3, true);
  check_paired(8, 24, 3, 64, KvFormat::kTq3, false);  // odd KV heads
  check_paired(8, 24, 8, 128, KvFormat::kTq3, true);   // session 15: group 3 (Llama-3.2-3B), gapped rows
  check_paired(8, 16, 8, 128, KvFormat::kTq3, true);   // group 2 (Qwen3-1.7B)
  check_paired(1, 4, 4, 64, KvFormat::kTq3, true);     // group 1
  check_paired(8, 40, 8, 128, KvFormat::kTq3, false);  // group 5: more than half the MMA columns
  check_paired(8, 9, 3, 64, KvFormat::kTq3, false);    // odd KV heads (SmolLM2-135M)
  // Session 17: after a one-wave TQ3 view, a small FP8 view (the Minima mix's anchor + recent pages at batch 1) is
  // planned into the slots the TQ3 CTAs leave free: fewer, longer FP8 items than planned alone, no longer than the
  // TQ3 chunk; at batch 8 (32 FP8 rows, more than the free slots) the FP8 plan is the one it gets alone.
  // At 128K the TQ3 wave alone would fill every slot; the plan takes a slightly longer TQ3 chunk to leave room.
  auto check_beside = [&](int num_seqs, int tq3_pages, bool expect_fewer) {
    std::vector<int32_t> tq3_indptr(size_t(num_seqs) + 1), fp8_indptr(size_t(num_seqs) + 1);
    std::vector<int32_t> full_last(size_t(num_seqs), 64);
    for (int s = 0; s <= num_seqs; ++s) {
      tq3_indptr[size_t(s)] = tq3_pages * s;  // Qwen 32K: 496 pages of TQ3, 20 of FP8 (1,280 tokens) per sequence
      fp8_indptr[size_t(s)] = 20 * s;
    }
    const CudaViewLengths mix[2] = {{KvFormat::kFp8, 64, fp8_indptr.data(), full_last.data()},
                                    {KvFormat::kTq3, 64, tq3_indptr.data(), full_last.data()}};
    const CudaDecodeShape shape{num_seqs, 24, 4, 256, 0.0625f, 0};
    CudaDecodePlan alone;
    const bool ok = CudaDecodePlan::Create(shape, mix, 2, 132, &plan).ok() &&
                    CudaDecodePlan::Create(shape, mix, 1, 132, &alone).ok();
    const int fp8_items = ok ? plan.view_items(0) : -1;
    const int fp8_alone = ok ? alone.view_items(0) : -1;
    const bool chunk_ok = ok && 20 * plan.view_items(1) <= tq3_pages * fp8_items;
    CHECK(ok && (expect_fewer ? fp8_items < fp8_alone && chunk_ok : fp8_items == fp8_alone),
          "%d seqs: FP8 items %d beside TQ3 (%d items), %d alone (expected %s)", num_seqs, fp8_items,
          ok ? plan.view_items(1) : -1, fp8_alone, expect_fewer ? "fewer, chunk <= TQ3's" : "the same");
  };
  check_beside(1, 496, true);
  check_beside(8, 496, false);
  check_beside(1, 2028, true);  // 128K
  CudaViewLengths odd{KvFormat::kFp8, 24, indptr, last};
  CHECK(!CudaDecodePlan::Create({1, 8, 4, 128, 0.1f, 0}, &odd, 1, 132, &plan).ok(), "page_tokens 24 accepted");
  const int32_t bad_last[1] = {17};
  CudaViewLengths bad{KvFormat::kFp8, 16, indptr, bad_last};
  CHECK(!CudaDecodePlan::Create({1, 8, 4, 128, 0.1f, 0}, &bad, 1, 132, &plan).ok(), "last_page_tokens 17 accepted");
}

}  // namespace

int main() {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::mt19937_64 rng(20261129);
  const auto start = std::chrono::steady_clock::now();

  std::printf("append\n");
  for (int d : {64, 128, 256}) {
    for (KvFormat f : {KvFormat::kFp8, KvFormat::kBf16}) {
      for (CudaInputDtype dt : {CudaInputDtype::kFloat32, CudaInputDtype::kBf16}) TestAppend(rng, d, f, dt);
    }
  }
  std::printf("convert\n");
  for (int d : {64, 128, 256}) {
    for (int pt : {16, 48}) TestConvert(rng, d, pt);
  }
  std::printf("plan errors\n");
  TestPlanErrors();
  std::printf("decode\n");
  const std::vector<std::vector<KvFormat>> format_sets = {
      {KvFormat::kBf16}, {KvFormat::kFp8}, {KvFormat::kTq3}, {KvFormat::kFp8, KvFormat::kTq3},
      {KvFormat::kTq3, KvFormat::kBf16, KvFormat::kFp8}};
  // (v12: d = 256 with pages of 64 and 32 tokens and d = 128 with pages of 128: the TQ3 kernel's regular-unit copies
  // for 4, 2 and 8 tiles per page, which pages of 16 tokens never take.)
  const DecodeCase shapes[] = {{24, 4, 256, 16, {}, 0}, {32, 8, 128, 64, {}, 0}, {8, 8, 128, 32, {}, 1},
                               {16, 2, 256, 16, {}, 1}, {12, 4, 128, 16, {}, 3}, {24, 4, 256, 64, {}, 1},
                               {16, 2, 256, 32, {}, 3},  {32, 8, 128, 128, {}, 1},
                               // v16: groups > 8 as head tiles (16 = 8 + 8, 12 = 6 + 6, 9 = 5 + 4, 64 = 8 x 8)
                               {64, 4, 128, 16, {}, 3},  {32, 2, 128, 64, {}, 0}, {24, 2, 128, 16, {}, 0},
                               {48, 4, 128, 64, {}, 1},  {18, 2, 128, 16, {}, 3}, {64, 1, 128, 64, {}, 0},
                               // v16: head_dim 64 (groups 1, 4, 8, and 16 as two head tiles)
                               {8, 8, 64, 16, {}, 0},    {8, 8, 64, 64, {}, 1},    {16, 4, 64, 16, {}, 3},
                               {32, 8, 64, 64, {}, 0},   {16, 2, 64, 64, {}, 3},   {24, 3, 64, 16, {}, 1},
                               {32, 2, 64, 64, {}, 0},
                               // v17: FP8 / TQ3 CTAs of 9-16 heads (two head tiles, one read) at d = 128 and 64 with
                               // odd groups (9, 13), pages of 16 and 64; 17 = 9 + 8 and 24 = 12 + 12 (two such CTAs);
                               // d = 256 groups 9 and 16 (FP8 / TQ3: tiles of 8; BF16: two head tiles at every d)
                               {26, 2, 128, 64, {}, 0},  {13, 1, 128, 16, {}, 3},  {9, 1, 128, 64, {}, 1},
                               {17, 1, 128, 16, {}, 0},  {48, 2, 128, 64, {}, 3},  {18, 2, 64, 16, {}, 0},
                               {13, 1, 64, 64, {}, 3},   {26, 2, 64, 16, {}, 1},   {16, 1, 64, 16, {}, 0},
                               {9, 1, 64, 64, {}, 0},    {18, 2, 256, 16, {}, 0},  {16, 1, 256, 64, {}, 3}};
  // v23: a TQ3 view at d = 128 with groups <= 8 runs narrow or wide CTAs (the plan's choice): both are tested.
  auto ctas_variants = [](const DecodeCase& c) {
    const bool tq3 = std::find(c.formats.begin(), c.formats.end(), KvFormat::kTq3) != c.formats.end();
    if (tq3 && c.head_dim == 128 && c.num_q_heads / c.kv_heads <= 8) {
      return std::vector<CudaTq3Ctas>{CudaTq3Ctas::kNarrow, CudaTq3Ctas::kWide};
    }
    return std::vector<CudaTq3Ctas>{CudaTq3Ctas::kAuto};
  };
  // Every shape x format set (x CTA shape), each a TestDecode of num_seqs sequences (fixed_tokens: their lengths).
  auto test_all = [&](const auto& shape_list, int num_seqs, const std::vector<int>* fixed_tokens) {
    for (const DecodeCase& base : shape_list) {
      for (const auto& formats : format_sets) {
        DecodeCase c = base;
        c.formats = formats;
        for (CudaTq3Ctas ctas : ctas_variants(c)) {
          c.tq3_ctas = ctas;
          TestDecode(rng, c, num_seqs, fixed_tokens);
        }
      }
    }
  };
  test_all(shapes, 6, nullptr);
  // v20: rows split over many items with odd lengths (a long sequence at the device's SM count: tens of 128-token
  // items; one at 1 SM: few items, many units each), short rows (1, 31, 333 tokens), an empty sequence; every case
  // also replays the captured step.
  const std::vector<int> split_tokens = {6011, 0, 1, 333, 4097, 31};
  const DecodeCase split_shapes[] = {{24, 4, 256, 16, {}, 0}, {32, 8, 128, 64, {}, 0}, {16, 2, 256, 32, {}, 1},
                                     {26, 2, 128, 64, {}, 0}, {8, 8, 64, 16, {}, 3}};
  test_all(split_shapes, int(split_tokens.size()), &split_tokens);
  // v27: TQ3 views at d = 128 with groups of 4 and an even number of KV heads as KV head pairs (the plan's default
  // there; the runs above force narrow or wide CTAs). Run last so that the cases above keep their random draws.
  // Pages of 16 (per-tile copies), 32, 64, 128 (regular units of 2, 4, 8 tiles per page), one pair and four.
  // Paired TQ3 CTAs forced (kPaired) over every format set with TQ3, random lengths and the split lengths.
  auto test_paired = [&](const auto& paired_cases) {
    for (const bool split : {false, true}) {
      for (const DecodeCase& base : paired_cases) {
        for (const auto& formats : format_sets) {
          if (std::find(formats.begin(), formats.end(), KvFormat::kTq3) == formats.end()) continue;
          DecodeCase c = base;
          c.formats = formats;
          c.tq3_ctas = CudaTq3Ctas::kPaired;
          if (split) {
            TestDecode(rng, c, int(split_tokens.size()), &split_tokens);
          } else {
            TestDecode(rng, c, 6, nullptr);
          }
        }
      }
    }
  };
  const DecodeCase paired_shapes[] = {{32, 8, 128, 64, {}, 0}, {32, 8, 128, 128, {}, 1}, {16, 4, 128, 16, {}, 3},
                                      {8, 2, 128, 32, {}, 0}};
  test_paired(paired_shapes);
  // v28: the same at d = 64 (pairs through the d = 128 kernel; pages of 16 and 32 per-tile copies, 64 and 128 too,
  // since 48-chunk runs are no whole rounds of the warp). Run after all the above for the same reason.
  const DecodeCase paired64_shapes[] = {{32, 8, 64, 64, {}, 0}, {16, 4, 64, 128, {}, 1}, {8, 2, 64, 16, {}, 3},
                                        {8, 2, 64, 32, {}, 0}};
  test_paired(paired64_shapes);
  // Session 15: groups of 1-3 in gapped rows (head a's queries in rows 0 .. g-1, head b's in 4 .. 3 + g), d 128 and
  // 64, after all the above for the same reason.
  const DecodeCase gapped_shapes[] = {{24, 8, 128, 64, {}, 0}, {16, 8, 128, 16, {}, 1}, {6, 2, 128, 128, {}, 3},
                                      {2, 2, 128, 32, {}, 0},  {12, 4, 64, 64, {}, 1},  {4, 4, 64, 16, {}, 0}};
  test_paired(gapped_shapes);
  // Session 16: several query tokens per sequence (rows = group x tokens per KV head, mapped back to [token][head]):
  // every format set, CTA shapes of the plan's choice. Llama group 4 x 2 (8 rows: narrow / wide), group 2 x 2 and
  // group 1 x 4 (4 rows: paired at d 128 / 64), d 256 group 6 x 3 (18 rows: three FP8 / TQ3 CTAs, two BF16), group
  // 8 x 4 (32 rows: two CTAs of two tiles), group 8 x 8 (64 rows, the limit), group 3 x 5 (15 rows: two tiles, odd).
  // Run last.
  struct TokenCase {
    DecodeCase shape;
    int tokens;
  };
  const TokenCase token_cases[] = {{{32, 8, 128, 64, {}, 0}, 2}, {{16, 8, 128, 16, {}, 1}, 2},
                                   {{8, 8, 64, 32, {}, 0}, 4},   {{24, 4, 256, 16, {}, 3}, 3},
                                   {{64, 8, 128, 64, {}, 0}, 4}, {{16, 2, 128, 16, {}, 0}, 8},
                                   {{24, 8, 128, 128, {}, 1}, 5}};
  for (const bool split : {false, true}) {
    for (const TokenCase& tc : token_cases) {
      for (const auto& formats : format_sets) {
        DecodeCase c = tc.shape;
        c.formats = formats;
        c.query_tokens = tc.tokens;
        if (split) {
          TestDecode(rng, c, int(split_tokens.size()), &split_tokens);
        } else {
          TestDecode(rng, c, 6, nullptr);
        }
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d checks, %d failures (%.1f s, %u host threads)\n", g_checks, g_failures, seconds,
              std::max(1u, std::thread::hardware_concurrency()));
  if (g_failures == 0) std::printf("ALL CUDA TESTS PASSED\n");
  return g_failures == 0 ? 0 : 1;
}
