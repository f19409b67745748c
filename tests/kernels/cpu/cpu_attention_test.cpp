// Direct CPU kernels vs the materializing fp64 reference on the SAME pages, for every format and ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "minimakv/cpu_attention.h"
#include "minimakv/partial_state.h"
#include "minimakv/reference_attention.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/thread_pool.h"
#include "minimakv/tq3_codec.h"
#include "tools/synthetic_kv.h"

namespace minimakv {
namespace {

constexpr double kMaxRelL2 = 1e-5;    // the bound for direct decode vs the reference on the same pages
constexpr double kMaxLseError = 1e-5;  // absolute, in log2 units
constexpr float kCanary = -12345.678f;
constexpr int kCanaryFloats = 64;

// Dense K/V of a batch: kv[s] is [tokens][kv_heads][head_dim].
struct DenseBatch {
  int kv_heads = 0;
  int head_dim = 0;
  std::vector<std::vector<float>> k, v;
};

DenseBatch MakeBatch(const std::vector<int64_t>& lengths, int kv_heads, int head_dim, uint64_t seed) {
  DenseBatch batch;
  batch.kv_heads = kv_heads;
  batch.head_dim = head_dim;
  GaussianSource gauss(seed);
  for (int64_t n : lengths) {
    batch.k.emplace_back(size_t(n) * kv_heads * head_dim);
    batch.v.emplace_back(size_t(n) * kv_heads * head_dim);
    gauss.Fill(batch.k.back().data(), batch.k.back().size());
    gauss.Fill(batch.v.back().data(), batch.v.back().size());
  }
  return batch;
}

KvSource SourceOf(const DenseBatch& batch) {
  return [&batch](int seq, int64_t token, float* k, float* v) {
    const size_t stride = size_t(batch.kv_heads) * batch.head_dim;
    std::memcpy(k, batch.k[size_t(seq)].data() + size_t(token) * stride, stride * sizeof(float));
    std::memcpy(v, batch.v[size_t(seq)].data() + size_t(token) * stride, stride * sizeof(float));
  };
}

std::vector<std::vector<TokenRange>> WholeSequences(const std::vector<int64_t>& lengths) {
  std::vector<std::vector<TokenRange>> ranges;
  for (int64_t n : lengths) ranges.push_back(n == 0 ? std::vector<TokenRange>{} : std::vector<TokenRange>{{0, n}});
  return ranges;
}

struct QueryBatch {
  std::vector<float> q;
  std::vector<int32_t> indptr;
  AttentionQueries Queries(int q_heads, int head_dim) const {
    AttentionQueries queries;
    queries.q = q.data();
    queries.q_indptr = indptr.data();
    queries.num_seqs = int(indptr.size()) - 1;
    queries.num_q_heads = q_heads;
    queries.sm_scale = float(1.0 / std::sqrt(double(head_dim)));
    return queries;
  }
};

// q_lens[s] query tokens per sequence; `peak` scales queries so attention is sharper than uniform.
QueryBatch MakeQueries(const std::vector<int>& q_lens, int q_heads, int head_dim, float peak, uint64_t seed) {
  QueryBatch batch;
  batch.indptr.push_back(0);
  for (int n : q_lens) batch.indptr.push_back(batch.indptr.back() + n);
  batch.q.resize(size_t(batch.indptr.back()) * q_heads * head_dim);
  GaussianSource gauss(seed);
  gauss.Fill(batch.q.data(), batch.q.size());
  for (float& x : batch.q) x *= peak;
  return batch;
}

// Output buffers with canaries on both sides.
struct GuardedBuffer {
  std::vector<float> storage;
  size_t size = 0;
  explicit GuardedBuffer(size_t n) : storage(n + 2 * kCanaryFloats, kCanary), size(n) {
    // The interior starts as NaN so an unwritten element fails the comparison.
    for (size_t i = 0; i < n; ++i) storage[kCanaryFloats + i] = NAN;
  }
  float* data() { return storage.data() + kCanaryFloats; }
  const float* data() const { return storage.data() + kCanaryFloats; }
  bool CanariesIntact() const {
    for (int i = 0; i < kCanaryFloats; ++i) {
      if (storage[size_t(i)] != kCanary || storage[kCanaryFloats + size + size_t(i)] != kCanary) return false;
    }
    return true;
  }
};

double RelL2(const float* got, const std::vector<double>& want) {
  double err = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = double(got[i]) - want[i];
    err += diff * diff;
    norm += want[i] * want[i];
  }
  return norm == 0.0 ? std::sqrt(err) : std::sqrt(err / norm);
}

double RelL2(const float* got, const float* want, size_t n) {
  std::vector<double> w(want, want + n);
  return RelL2(got, w);
}

// Kernel families the tests run where the machine has them: every SIMD family is checked, not just the one
// the dispatcher prefers.
const char* const kIsas[] = {"amx", "avx512", "scalar"};

// Options that run `isa` for every format ("auto": the dispatcher's choice per task, always true); false when
// this machine does not have it. "amx/i8", "auto/i8": the same with TQ3 scores on AMX-INT8 and values on bf16
// tiles (false without AMX-INT8); plain "amx" and "auto" run the defaults (int8 scores and values there).
// "amx/i8v", "auto/i8v": TQ3 scores and values on AMX-INT8 (CpuTq3Values::kInt8).
bool OptionsForIsa(const std::string& isa_entry, CpuAttentionOptions* options) {
  std::string isa = isa_entry;
  if (isa.ends_with("/i8v")) {
    if (!cpu::AmxInt8Usable()) return false;
    options->tq3_scores = CpuTq3Scores::kInt8;
    options->tq3_values = CpuTq3Values::kInt8;
    isa = isa.substr(0, isa.size() - 4);
  } else if (isa.ends_with("/i8")) {
    if (!cpu::AmxInt8Usable()) return false;
    options->tq3_scores = CpuTq3Scores::kInt8;
    options->tq3_values = CpuTq3Values::kBf16;  // the session-8 kernel: int8 scores, bf16 values
    isa = isa.substr(0, isa.size() - 3);
  }
  if (isa == "auto") {
    options->family = CpuKernelFamily::kAuto;
    return true;
  }
  options->family = isa == "amx" ? CpuKernelFamily::kAmx : isa == "avx512" ? CpuKernelFamily::kAvx512
                                                                           : CpuKernelFamily::kScalar;
  return CpuKernelIsa(*options) == isa;
}

// With TQ3 scores on AMX-INT8 asked for, every AMX TQ3 task must run the int8 kernel (no silent fallback to the
// bf16 scores): the dispatcher's kernel for every row count, and the name the public API reports.
void ExpectInt8KernelChosen(const CpuAttentionOptions& options, int group, int head_dim) {
  for (int rows = 1; rows <= cpu::kMaxTaskRows; ++rows) {
    if (cpu::SelectIsa(options.family, options.force_scalar, KvFormat::kTq3, rows, head_dim, options.tq3_scores) !=
        cpu::CpuIsa::kAmx) {
      continue;
    }
    // int8 values (kInt8, and kAuto since session 9) run their own kernel; kBf16 the bf16 value pass.
    const cpu::KernelFn want = options.tq3_values == CpuTq3Values::kBf16 ? &cpu::AttendAmxTq3Int8
                                                                          : &cpu::AttendAmxTq3Int8Values;
    EXPECT_EQ(cpu::SelectKernel(options, KvFormat::kTq3, rows, head_dim), want) << "rows " << rows << " d " << head_dim;
  }
  const std::string scores = CpuTq3ScoresFor(options, group, head_dim);
  EXPECT_TRUE(scores == "int8" || scores.empty()) << scores;
  const std::string values = CpuTq3ValuesFor(options, group, head_dim);
  const char* want_values = options.tq3_values == CpuTq3Values::kBf16 ? "bf16" : "int8";
  EXPECT_TRUE(values == want_values || values.empty()) << values;
  if (options.family == CpuKernelFamily::kAmx) {
    EXPECT_EQ(scores, "int8");
    EXPECT_EQ(values, want_values);
  }
}

// Checks outputs and LSEs against the reference; empty rows must be exactly (0, -inf).
void ExpectMatchesReference(const float* out, const float* lse, const std::vector<double>& want_out,
                            const std::vector<double>& want_lse, const std::string& what) {
  EXPECT_LE(RelL2(out, want_out), kMaxRelL2) << what;
  const size_t d = want_out.size() / want_lse.size();
  for (size_t r = 0; r < want_lse.size(); ++r) {
    if (std::isinf(want_lse[r])) {
      ASSERT_EQ(lse[r], -INFINITY) << what << " row " << r;
      for (size_t i = 0; i < d; ++i) ASSERT_EQ(out[r * d + i], 0.0f) << what << " row " << r;
    } else {
      ASSERT_NEAR(lse[r], want_lse[r], kMaxLseError * std::fmax(1.0, std::fabs(want_lse[r]))) << what << " row " << r;
    }
  }
}

using KernelParam = std::tuple<KvFormat, int /*head_dim*/, int /*group*/, std::string /*isa*/>;

// Direct decode of `isa` (with at most max_task_rows rows per task) against the reference on the same pages:
// 6 sequences (q_len 1-3: rows = tokens x heads of the group), 1 and 2 threads, two query scales.
void CheckKernelVsReference(KvFormat format, int head_dim, int group, const CpuAttentionOptions& isa_options) {
  constexpr int kKvHeads = 2;
  constexpr int kPageTokens = 16;
  // Empty, single-token, odd, exact-page, partly filled last page, several pages.
  const std::vector<int64_t> lengths = {0, 1, 37, 64, 131, 250};
  const std::vector<int> q_lens = {1, 1, 3, 1, 2, 1};
  const int q_heads = kKvHeads * group;
  const DenseBatch batch = MakeBatch(lengths, kKvHeads, head_dim, 11);
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(head_dim, HadamardRotation::kDefaultSeed, &rotation).ok());
  SyntheticPool pool;
  const PageLayout layout{format, kKvHeads, head_dim, kPageTokens};
  ASSERT_TRUE(BuildSyntheticPool(layout, &rotation, WholeSequences(lengths), SourceOf(batch), /*shuffle*/ 99, &pool).ok());
  for (float peak : {1.0f, 4.0f}) {
    const QueryBatch qb = MakeQueries(q_lens, q_heads, head_dim, peak, 5);
    const AttentionQueries queries = qb.Queries(q_heads, head_dim);
    const PagedKvView view = pool.View();
    std::vector<double> want_out, want_lse;
    ASSERT_TRUE(ReferenceAttention({&view, 1}, queries, &rotation, &want_out, &want_lse).ok());
    for (int threads : {1, 2}) {
      GuardedBuffer out(want_out.size());
      GuardedBuffer lse(want_lse.size());
      CpuAttentionOptions options = isa_options;
      options.num_threads = threads;
      const Status status = ComputePartialStatesCpu(view, queries, &rotation, {out.data(), lse.data()}, options);
      ASSERT_TRUE(status.ok()) << status.ToString();
      ExpectMatchesReference(out.data(), lse.data(), want_out, want_lse,
                             std::string(CpuKernelIsaFor(options, format, group, head_dim)) + " max_task_rows " +
                                 std::to_string(options.max_task_rows) + " peak " + std::to_string(peak) +
                                 " threads " + std::to_string(threads));
      EXPECT_TRUE(out.CanariesIntact());
      EXPECT_TRUE(lse.CanariesIntact());
      if (format == KvFormat::kTq3 && options.tq3_scores == CpuTq3Scores::kInt8) {
        ExpectInt8KernelChosen(options, group, head_dim);
        // Another tile variant on the same pages: also within the bound, and (on AMX) not the same bits as the
        // int8 run, whose fixed-point query or weights round differently from the exact three-part bf16 split.
        auto expect_other_variant = [&](const CpuAttentionOptions& other, const char* what) {
          std::vector<float> out_other(want_out.size()), lse_other(want_lse.size());
          ASSERT_TRUE(
              ComputePartialStatesCpu(view, queries, &rotation, {out_other.data(), lse_other.data()}, other).ok());
          ExpectMatchesReference(out_other.data(), lse_other.data(), want_out, want_lse, what);
          if (options.family == CpuKernelFamily::kAmx) {
            EXPECT_NE(std::memcmp(out_other.data(), out.data(), want_out.size() * sizeof(float)), 0)
                << "int8 == " << what << " bits";
          }
        };
        CpuAttentionOptions bf16_scores = options;
        bf16_scores.tq3_scores = CpuTq3Scores::kBf16;
        expect_other_variant(bf16_scores, "bf16 scores");
        if (options.tq3_values == CpuTq3Values::kInt8) {  // int8 scores with bf16 values
          CpuAttentionOptions bf16_values = options;
          bf16_values.tq3_values = CpuTq3Values::kBf16;
          expect_other_variant(bf16_values, "bf16 values");
        }
      }
    }
  }
}

class CpuKernelVsReference : public ::testing::TestWithParam<KernelParam> {};

TEST_P(CpuKernelVsReference, MatchesOnSamePages) {
  const auto [format, head_dim, group, isa] = GetParam();
  CpuAttentionOptions isa_options;
  if (!OptionsForIsa(isa, &isa_options)) GTEST_SKIP() << isa << " kernels do not run on this machine";
  CheckKernelVsReference(format, head_dim, group, isa_options);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, CpuKernelVsReference,
                         ::testing::Combine(::testing::Values(KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3),
                                            ::testing::Values(64, 128, 256), ::testing::Values(1, 2, 4, 6, 8),
                                            ::testing::ValuesIn(std::vector<std::string>(std::begin(kIsas), std::end(kIsas)))),
                         [](const ::testing::TestParamInfo<KernelParam>& info) {
                           return std::string(KvFormatName(std::get<0>(info.param))) + "_d" +
                                  std::to_string(std::get<1>(info.param)) + "_g" +
                                  std::to_string(std::get<2>(info.param)) +
                                  "_" + std::get<3>(info.param);
                         });

// TQ3 scores on AMX-INT8 (CpuTq3Scores::kInt8): every head_dim, GQA groups 1..8, q_len 1-3, odd lengths; "auto/i8"
// runs AVX-512 for one-row tasks and the int8 AMX kernel for the others.
std::string Int8ParamName(const ::testing::TestParamInfo<KernelParam>& info) {
  std::string isa = std::get<3>(info.param);
  isa.replace(isa.find('/'), 1, "_");
  return "d" + std::to_string(std::get<1>(info.param)) + "_g" + std::to_string(std::get<2>(info.param)) + "_" + isa;
}
INSTANTIATE_TEST_SUITE_P(Tq3Int8Scores, CpuKernelVsReference,
                         ::testing::Combine(::testing::Values(KvFormat::kTq3), ::testing::Values(64, 128, 256),
                                            ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8),
                                            ::testing::Values("amx/i8", "auto/i8")),
                         Int8ParamName);

// TQ3 values on AMX-INT8 too (CpuTq3Values::kInt8): the same shapes; one row block of weight digits for groups
// up to 5, two for 6-8 (and tasks of q_len x group rows up to 8).
INSTANTIATE_TEST_SUITE_P(Tq3Int8Values, CpuKernelVsReference,
                         ::testing::Combine(::testing::Values(KvFormat::kTq3), ::testing::Values(64, 128, 256),
                                            ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8),
                                            ::testing::Values("amx/i8v", "auto/i8v")),
                         Int8ParamName);

// GQA groups of 9-16 (GLM-4.5 / Qwen3-Coder-480B: 12; Qwen3-235B-A22B, Llama-3.1-405B: 16): one task of the
// whole group on AMX and scalar, pieces of 8 on AVX-512, the dispatcher's choice for auto; and max_task_rows 8
// (every family in pieces of 8, the layout before 16-row tasks). q_len 3 and 2 give 48 and 32 rows per sequence.
class CpuKernelLargeGroups : public ::testing::TestWithParam<KernelParam> {};

TEST_P(CpuKernelLargeGroups, MatchesOnSamePages) {
  const auto [format, head_dim, group, isa] = GetParam();
  CpuAttentionOptions isa_options;
  if (!OptionsForIsa(isa, &isa_options)) GTEST_SKIP() << isa << " kernels do not run on this machine";
  for (int max_task_rows : {cpu::kMaxTaskRows, cpu::kNarrowTaskRows}) {
    CpuAttentionOptions options = isa_options;
    options.max_task_rows = max_task_rows;
    CheckKernelVsReference(format, head_dim, group, options);
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, CpuKernelLargeGroups,
                         ::testing::Combine(::testing::Values(KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3),
                                            ::testing::Values(64, 128, 256), ::testing::Values(9, 12, 16),
                                            ::testing::Values("amx", "avx512", "scalar", "auto")),
                         [](const ::testing::TestParamInfo<KernelParam>& info) {
                           return std::string(KvFormatName(std::get<0>(info.param))) + "_d" +
                                  std::to_string(std::get<1>(info.param)) + "_g" +
                                  std::to_string(std::get<2>(info.param)) + "_" + std::get<3>(info.param);
                         });
// Groups of 9-16 with TQ3 scores on AMX-INT8: one task of 9-16 rows (three score C tiles), and tasks of 8.
INSTANTIATE_TEST_SUITE_P(Tq3Int8Scores, CpuKernelLargeGroups,
                         ::testing::Combine(::testing::Values(KvFormat::kTq3), ::testing::Values(64, 128, 256),
                                            ::testing::Values(9, 11, 12, 16), ::testing::Values("amx/i8")),
                         Int8ParamName);
// The same with int8 values: three row blocks of weight digits (groups 11-16) and two (9, 10; tasks of 8).
INSTANTIATE_TEST_SUITE_P(Tq3Int8Values, CpuKernelLargeGroups,
                         ::testing::Combine(::testing::Values(KvFormat::kTq3), ::testing::Values(64, 128, 256),
                                            ::testing::Values(9, 10, 11, 12, 16), ::testing::Values("amx/i8v")),
                         Int8ParamName);

// The planner's rows per task (TaskRowsFor): groups up to 8 as before (whole groups within 8 rows), larger
// groups whole on the families that take 16 rows, in pieces of 8 on AVX-512 or with max_task_rows 8.
TEST(CpuDispatch, TaskRowsFollowEachFamilysLimit) {
  // A family the machine lacks runs the next one down (UsableIsa), with that one's limit.
  const bool amx_takes_16 = cpu::MaxTaskRowsOf(cpu::UsableIsa(cpu::CpuIsa::kAmx)) == cpu::kMaxTaskRows;
  const bool avx512_takes_16 = cpu::MaxTaskRowsOf(cpu::UsableIsa(cpu::CpuIsa::kAvx512)) == cpu::kMaxTaskRows;
  auto rows = [](CpuKernelFamily family, KvFormat format, int group, int max_task_rows) {
    return cpu::TaskRowsFor(family, false, format, group, 128, max_task_rows);
  };
  for (KvFormat format : {KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3}) {
    EXPECT_EQ(rows(CpuKernelFamily::kScalar, format, 1, 16), 8);
    EXPECT_EQ(rows(CpuKernelFamily::kScalar, format, 3, 16), 6);
    EXPECT_EQ(rows(CpuKernelFamily::kScalar, format, 8, 16), 8);
    EXPECT_EQ(rows(CpuKernelFamily::kScalar, format, 12, 16), 12);
    EXPECT_EQ(rows(CpuKernelFamily::kScalar, format, 16, 16), 16);
    EXPECT_EQ(rows(CpuKernelFamily::kScalar, format, 32, 16), 16);
    EXPECT_EQ(rows(CpuKernelFamily::kScalar, format, 16, 8), 8);
    EXPECT_EQ(rows(CpuKernelFamily::kScalar, format, 12, 4), 4);
    EXPECT_EQ(rows(CpuKernelFamily::kAvx512, format, 16, 16), avx512_takes_16 ? 16 : 8);
    EXPECT_EQ(rows(CpuKernelFamily::kAvx512, format, 12, 16), avx512_takes_16 ? 12 : 8);
    EXPECT_EQ(rows(CpuKernelFamily::kAmx, format, 12, 16), amx_takes_16 ? 12 : 8);
    EXPECT_EQ(rows(CpuKernelFamily::kAmx, format, 24, 16), amx_takes_16 ? 16 : 8);
    EXPECT_EQ(rows(CpuKernelFamily::kAmx, format, 16, 8), 8);
    // What runs a task of the planned rows is never a family that takes fewer.
    for (CpuKernelFamily family : {CpuKernelFamily::kAuto, CpuKernelFamily::kAmx, CpuKernelFamily::kAvx512,
                                   CpuKernelFamily::kScalar}) {
      for (int group : {1, 4, 8, 9, 12, 16, 24}) {
        for (int d : {64, 128, 256}) {
          const int planned = cpu::TaskRowsFor(family, false, format, group, d, cpu::kMaxTaskRows);
          EXPECT_LE(planned, cpu::MaxTaskRowsOf(cpu::SelectIsa(family, false, format, planned, d)))
              << KvFormatName(format) << " group " << group << " d " << d;
        }
      }
    }
  }
}

// Prefill-like calls: many query tokens per sequence (row blocks of whole GQA groups, every row count 1..8
// reached; groups 9-15 give AMX and scalar tasks of 9-15 rows and AVX-512 pieces of 8 + 1..7), odd groups,
// several pages.
TEST(CpuAttention, ManyQueryTokensOddGroupsMatchReference) {
  constexpr int kHeadDim = 64;
  constexpr int kKvHeads = 2;
  const std::vector<int64_t> lengths = {37, 200};
  const DenseBatch batch = MakeBatch(lengths, kKvHeads, kHeadDim, 51);
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(kHeadDim, HadamardRotation::kDefaultSeed, &rotation).ok());
  for (KvFormat format : {KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3}) {
    SyntheticPool pool;
    ASSERT_TRUE(BuildSyntheticPool({format, kKvHeads, kHeadDim, 16}, &rotation, WholeSequences(lengths),
                                   SourceOf(batch), 5, &pool).ok());
    const PagedKvView view = pool.View();
    for (int group : {1, 3, 5, 7, 9, 10, 11, 13, 14, 15}) {
      for (int q_len : {5, 9, 13, 27}) {
        const int q_heads = kKvHeads * group;
        const QueryBatch qb = MakeQueries({q_len, q_len - 2}, q_heads, kHeadDim, 2.0f, 61);
        const AttentionQueries queries = qb.Queries(q_heads, kHeadDim);
        std::vector<double> want_out, want_lse;
        ASSERT_TRUE(ReferenceAttention({&view, 1}, queries, &rotation, &want_out, &want_lse).ok());
        // Every family alone, then kAuto, which may run different families for the tasks of one call (its
        // choice depends on each task's rows).
        for (const std::string isa : {"amx", "avx512", "scalar", "auto", "amx/i8"}) {
          CpuAttentionOptions options;
          if (isa != "auto" && !OptionsForIsa(isa, &options)) continue;
          for (int threads : {1, 2}) {
            GuardedBuffer out(want_out.size());
            GuardedBuffer lse(want_lse.size());
            options.num_threads = threads;
            ASSERT_TRUE(AttendMixedCpu({&view, 1}, queries, &rotation, out.data(), lse.data(), options).ok());
            ExpectMatchesReference(out.data(), lse.data(), want_out, want_lse,
                                   std::string(KvFormatName(format)) + " group " + std::to_string(group) +
                                       " q_len " + std::to_string(q_len) + " " + isa + " " + CpuKernelIsa(options) +
                                       " threads " + std::to_string(threads));
            EXPECT_TRUE(out.CanariesIntact());
            EXPECT_TRUE(lse.CanariesIntact());
          }
        }
      }
    }
  }
}

// The int8 scores round each query coordinate to a fixed point relative to the row's largest |coordinate|, so a
// query with outlier channels (as real queries have) loses the most there: one channel 50x and one 20x the others,
// and a query that is zero (fixed-point unit 0), still within the bound against the reference.
TEST(CpuAttention, Tq3Int8ScoresWithOutlierAndZeroQueries) {
  if (!cpu::AmxInt8Usable()) GTEST_SKIP() << "no AMX-INT8 on this machine";
  constexpr int kKvHeads = 2;
  constexpr int kGroup = 4;
  const std::vector<int64_t> lengths = {300, 77};
  for (int head_dim : {64, 256}) {
    const DenseBatch batch = MakeBatch(lengths, kKvHeads, head_dim, 71);
    HadamardRotation rotation;
    ASSERT_TRUE(HadamardRotation::Create(head_dim, HadamardRotation::kDefaultSeed, &rotation).ok());
    SyntheticPool pool;
    ASSERT_TRUE(BuildSyntheticPool({KvFormat::kTq3, kKvHeads, head_dim, 32}, &rotation, WholeSequences(lengths),
                                   SourceOf(batch), 9, &pool).ok());
    QueryBatch qb = MakeQueries({1, 2}, kKvHeads * kGroup, head_dim, 2.0f, 73);
    const size_t rows = qb.q.size() / size_t(head_dim);
    for (size_t r = 0; r < rows; ++r) {
      float* q = qb.q.data() + r * size_t(head_dim);
      if (r % 3 == 2) {
        std::fill(q, q + head_dim, 0.0f);
      } else {
        q[r % size_t(head_dim)] *= 50.0f;
        q[(r + 7) % size_t(head_dim)] *= 20.0f;
      }
    }
    const AttentionQueries queries = qb.Queries(kKvHeads * kGroup, head_dim);
    const PagedKvView view = pool.View();
    std::vector<double> want_out, want_lse;
    ASSERT_TRUE(ReferenceAttention({&view, 1}, queries, &rotation, &want_out, &want_lse).ok());
    for (const std::string isa : {"amx/i8", "amx/i8v"}) {
      CpuAttentionOptions options;
      ASSERT_TRUE(OptionsForIsa(isa, &options));
      ExpectInt8KernelChosen(options, kGroup, head_dim);
      GuardedBuffer out(want_out.size());
      GuardedBuffer lse(want_lse.size());
      ASSERT_TRUE(ComputePartialStatesCpu(view, queries, &rotation, {out.data(), lse.data()}, options).ok());
      ExpectMatchesReference(out.data(), lse.data(), want_out, want_lse, isa + " d " + std::to_string(head_dim));
      EXPECT_TRUE(out.CanariesIntact());
      EXPECT_TRUE(lse.CanariesIntact());
    }
  }
}

// The int8 value pass rounds each softmax weight to a fixed point relative to the largest weight times value
// scale of its row and 64-key block. The hardest inputs for that: sharp attention (weights spanning many octaves
// inside a block and blocks far below the running maximum), value scales spanning 1000x inside a block (the
// small-norm keys keep few bits), and whole blocks of zero values (scale 0: fixed-point unit 0).
TEST(CpuAttention, Tq3Int8ValuesWithSharpWeightsAndZeroValues) {
  if (!cpu::AmxInt8Usable()) GTEST_SKIP() << "no AMX-INT8 on this machine";
  constexpr int kKvHeads = 2;
  const std::vector<int64_t> lengths = {700, 130, 64};
  for (int head_dim : {64, 128, 256}) {
    DenseBatch batch = MakeBatch(lengths, kKvHeads, head_dim, 83);
    const size_t vector_floats = size_t(head_dim);
    for (size_t s = 0; s < batch.v.size(); ++s) {
      const size_t vectors = batch.v[s].size() / vector_floats;
      for (size_t i = 0; i < vectors; ++i) {
        const size_t token = i / size_t(kKvHeads);
        float factor = 1.0f;
        if (s == 0 && token >= 64 && token < 192) factor = 0.0f;       // two zero blocks of sequence 0
        if (s == 2) factor = 0.0f;                                      // a sequence of zero values
        if (token % 7 == 3) factor *= 0.001f;                           // norms spanning 1000x in a block
        float* v = batch.v[s].data() + i * vector_floats;
        for (size_t c = 0; c < vector_floats; ++c) v[c] *= factor;
      }
    }
    HadamardRotation rotation;
    ASSERT_TRUE(HadamardRotation::Create(head_dim, HadamardRotation::kDefaultSeed, &rotation).ok());
    SyntheticPool pool;
    ASSERT_TRUE(BuildSyntheticPool({KvFormat::kTq3, kKvHeads, head_dim, 64}, &rotation, WholeSequences(lengths),
                                   SourceOf(batch), 17, &pool).ok());
    for (int group : {4, 6, 12}) {
      for (float peak : {1.0f, 6.0f, 12.0f}) {
        const QueryBatch qb = MakeQueries({1, 2, 1}, kKvHeads * group, head_dim, peak, 89);
        const AttentionQueries queries = qb.Queries(kKvHeads * group, head_dim);
        const PagedKvView view = pool.View();
        std::vector<double> want_out, want_lse;
        ASSERT_TRUE(ReferenceAttention({&view, 1}, queries, &rotation, &want_out, &want_lse).ok());
        CpuAttentionOptions options;
        ASSERT_TRUE(OptionsForIsa("amx/i8v", &options));
        ExpectInt8KernelChosen(options, group, head_dim);
        GuardedBuffer out(want_out.size());
        GuardedBuffer lse(want_lse.size());
        ASSERT_TRUE(ComputePartialStatesCpu(view, queries, &rotation, {out.data(), lse.data()}, options).ok());
        const std::string what = "d " + std::to_string(head_dim) + " group " + std::to_string(group) + " peak " +
                                 std::to_string(peak);
        ExpectMatchesReference(out.data(), lse.data(), want_out, want_lse, what);
        // Sequence 2 has only zero values: its outputs are exactly zero.
        const size_t row_floats = size_t(kKvHeads * group * head_dim);
        for (size_t i = 3 * row_floats; i < 4 * row_floats; ++i) ASSERT_EQ(out.data()[i], 0.0f) << what;
        EXPECT_TRUE(out.CanariesIntact());
        EXPECT_TRUE(lse.CanariesIntact());
      }
    }
  }
}

// One long sequence on two threads is split over page ranges and merged; larger pages than above.
TEST(CpuAttention, LongSequenceSplitOverThreadsMatchesReference) {
  constexpr int kHeadDim = 128;
  constexpr int kKvHeads = 1;
  constexpr int kGroup = 4;
  const std::vector<int64_t> lengths = {3001};
  const DenseBatch batch = MakeBatch(lengths, kKvHeads, kHeadDim, 21);
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(kHeadDim, 7, &rotation).ok());
  for (KvFormat format : {KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3}) {
    SyntheticPool pool;
    ASSERT_TRUE(BuildSyntheticPool({format, kKvHeads, kHeadDim, 64}, &rotation, WholeSequences(lengths),
                                   SourceOf(batch), 3, &pool).ok());
    const QueryBatch qb = MakeQueries({1}, kKvHeads * kGroup, kHeadDim, 3.0f, 8);
    const AttentionQueries queries = qb.Queries(kKvHeads * kGroup, kHeadDim);
    const PagedKvView view = pool.View();
    std::vector<double> want_out, want_lse;
    ASSERT_TRUE(ReferenceAttention({&view, 1}, queries, &rotation, &want_out, &want_lse).ok());
    std::vector<float> out_scalar(want_out.size()), lse_scalar(want_lse.size());
    CpuAttentionOptions options;
    options.force_scalar = true;
    options.num_threads = 1;
    ASSERT_TRUE(ComputePartialStatesCpu(view, queries, &rotation, {out_scalar.data(), lse_scalar.data()}, options).ok());
    ExpectMatchesReference(out_scalar.data(), lse_scalar.data(), want_out, want_lse, "scalar");
    for (const std::string isa : {"amx", "avx512", "amx/i8", "amx/i8v"}) {
      options = {};
      if (!OptionsForIsa(isa, &options)) continue;
      options.num_threads = 2;
      std::vector<float> out_simd(want_out.size()), lse_simd(want_lse.size());
      ASSERT_TRUE(ComputePartialStatesCpu(view, queries, &rotation, {out_simd.data(), lse_simd.data()}, options).ok());
      const std::string what = std::string(KvFormatName(format)) + " " + isa;
      ExpectMatchesReference(out_simd.data(), lse_simd.data(), want_out, want_lse, what);
      // Both accumulate in fp32 in different orders (scalar: one token at a time over 3001 tokens; SIMD: 16-lane
      // partial sums or tile sums, blocks of 64 keys, two page ranges merged), so they agree to a few fp32 ulps.
      EXPECT_LE(RelL2(out_simd.data(), out_scalar.data(), out_scalar.size()), 5e-6) << what;
      for (size_t r = 0; r < lse_simd.size(); ++r) EXPECT_NEAR(lse_simd[r], lse_scalar[r], 1e-5) << what;
      // On a persistent pool of two threads: the same page-range split and the same merges, so the same bits.
      ThreadPool thread_pool(2);
      CpuAttentionOptions pooled = options;
      pooled.num_threads = 1;  // ignored: the pool's size counts
      pooled.pool = &thread_pool;
      std::vector<float> out_pooled(want_out.size()), lse_pooled(want_lse.size());
      ASSERT_TRUE(ComputePartialStatesCpu(view, queries, &rotation, {out_pooled.data(), lse_pooled.data()}, pooled).ok());
      EXPECT_EQ(out_pooled, out_simd) << what << " on a pool";
      EXPECT_EQ(lse_pooled, lse_simd) << what << " on a pool";
    }
  }
}

// The AMX kernels hold TQ3 codes as one bf16 part, the signed unit B = alpha * centroid, and divide each
// vector's scale by alpha. Both halves must be exact: B exactly representable in bf16 (else every score and
// output carries a systematic error), and B / alpha equal to the fp32 centroid the reference decodes with, to
// within fp32 rounding (2^-24 relative).
TEST(CpuAmxKernels, Tq3CentroidUnitsAreExactInBf16) {
  uint16_t units[8];
  cpu::Tq3AmxCentroidUnits(units);
  if (!cpu::AmxUsable()) GTEST_SKIP() << "no AMX kernels on this machine";
  const double alpha = double(kTq3UnitsPerMagnitude);
  for (int i = 0; i < 8; ++i) {
    const double unit = (i & 4) ? -double(kTq3MagnitudeUnits[i & 3]) : double(kTq3MagnitudeUnits[i & 3]);
    EXPECT_EQ(double(Bf16ToFloat(units[i])), unit) << "index " << i;
    const double c = double(Tq3Centroid(i));
    EXPECT_LE(std::fabs(double(Bf16ToFloat(units[i])) / alpha - c), std::ldexp(std::fabs(c), -24)) << "index " << i;
  }
}

// The AMX-INT8 TQ3 expansions (key A-tile rows, value B-tile quads) against the codec's own reading of each
// index (Tq3GetIndex): random code bytes (every byte pattern is a valid code), every head_dim, 1-4 keys in a
// quad. Any wrong or misplaced byte of a tile row fails here, whatever its effect on a score.
TEST(CpuAmxKernels, Tq3Int8ExpansionsHoldEveryCoordinatesUnit) {
  if (!cpu::AmxInt8Usable()) GTEST_SKIP() << "no AMX-INT8 kernels on this machine";
  uint32_t state = 12345u;
  const auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  const auto unit_of = [](int index) {
    const int unit = int(kTq3MagnitudeUnits[index & 3]);
    return (index & 4) ? -unit : unit;
  };
  for (int d : {64, 128, 256}) {
    const int words = Tq3CodeBytes(d) / 4;
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<uint32_t> codes(size_t(4 * words));
      for (uint32_t& w : codes) w = next() ^ (next() << 16);
      if (trial == 0) std::fill(codes.begin(), codes.end(), 0xFFFFFFFFu);
      std::vector<int8_t> units(size_t(4 * d), 0);
      cpu::Tq3AmxInt8KeyUnits(reinterpret_cast<const uint8_t*>(codes.data()), d, units.data());
      for (int c = 0; c < d; ++c) {
        ASSERT_EQ(int(units[size_t(c)]), unit_of(Tq3GetIndex(codes.data(), c))) << "key, d " << d << " coordinate " << c;
      }
      const int n = 1 + trial % 4;
      std::fill(units.begin(), units.end(), int8_t(0));
      cpu::Tq3AmxInt8ValueUnits(reinterpret_cast<const uint8_t*>(codes.data()), size_t(4 * words), n, d, units.data());
      for (int k = 0; k < n; ++k) {
        for (int c = 0; c < d; ++c) {
          ASSERT_EQ(int(units[size_t(k * d + c)]), unit_of(Tq3GetIndex(codes.data() + k * words, c)))
              << "value, d " << d << " key " << k << " of " << n << " coordinate " << c;
        }
      }
    }
  }
}

// The AMX FP8 expansions (key A-tile rows, value B-tile pairs) against the E4M3 decode, for all 256 code bytes: the
// kernel converts normal codes by bit arithmetic and takes a table for 64-code registers holding zero, subnormal or
// NaN codes (Fp8Amx::Words), so every code is checked in registers of one code only, among random normal codes,
// and at random places among random bytes. Expected: the bf16 bits of E4m3ToFloat (exact for every number); a NaN
// code gives the quiet NaN 0x7FC0 with the code's sign bit (what the kernel's table always gave).
TEST(CpuAmxKernels, Fp8ExpansionsHoldEveryCodesBf16) {
  if (!cpu::AmxUsable()) GTEST_SKIP() << "no AMX kernels on this machine";
  const auto bf16_of = [](int code) {
    return uint16_t(((code & 0x80) << 8) | (FloatBits(E4m3ToFloat(uint8_t(code & 0x7F))) >> 16));
  };
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) != 0x7F) EXPECT_EQ(bf16_of(code), uint16_t(FloatBits(E4m3ToFloat(uint8_t(code))) >> 16)) << code;
  }
  const auto is_normal = [](int code) { return (code & 0x78) != 0 && (code & 0x7F) != 0x7F; };
  uint32_t state = 777u;
  const auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  const auto random_normal = [&] {
    int code;
    do code = int(next() & 0xFF); while (!is_normal(code));
    return uint8_t(code);
  };
  for (int d : {64, 128, 256}) {
    std::vector<uint8_t> codes(size_t(2 * d));
    std::vector<uint16_t> bf16(size_t(2 * d));
    const auto check = [&](const char* what) {
      cpu::Fp8AmxKeyBf16(codes.data(), d, bf16.data());
      for (int c = 0; c < d; ++c) {
        ASSERT_EQ(bf16[size_t(c)], bf16_of(codes[size_t(c)])) << what << ", key, d " << d << " coordinate " << c;
      }
      for (int n = 1; n <= 2; ++n) {
        std::fill(bf16.begin(), bf16.end(), uint16_t(0xDEAD));
        cpu::Fp8AmxValueBf16(codes.data(), n, d, bf16.data());
        for (int i = 0; i < 2 * d; ++i) {
          const int code = i < n * d ? codes[size_t(i)] : 0;  // a key past n reads as code 0 (+0)
          ASSERT_EQ(bf16[size_t(i)], bf16_of(code)) << what << ", value, d " << d << " n " << n << " element " << i;
        }
      }
    };
    for (int code = 0; code < 256; ++code) {
      std::fill(codes.begin(), codes.end(), uint8_t(code));
      check("one code");
      for (uint8_t& c : codes) c = random_normal();
      codes[next() % codes.size()] = uint8_t(code);
      check("among normal codes");
      for (uint8_t& c : codes) c = uint8_t(next());
      codes[next() % codes.size()] = uint8_t(code);
      check("among random bytes");
    }
  }
}

// Test inputs for the bit-identity tests of the kernels' query setup: row `kind` 0 Gaussian-like, 1 random bit
// patterns of finite floats (every exponent, subnormals), 2 zeros of both signs mixed with tiny and huge values,
// 3 all +-0, 4 values around 1e30 (butterfly sums overflow to inf, inf - inf gives NaN), 5 one inf or NaN among
// Gaussian-like values.
std::vector<float> SetupTestRow(int d, int kind, uint32_t& state) {
  const auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  const auto gaussian_like = [&] {  // sum of uniforms, enough for varied magnitudes and signs
    float s = 0.0f;
    for (int k = 0; k < 4; ++k) s += float(next() >> 8) / float(1u << 24) - 0.5f;
    return s;
  };
  std::vector<float> row(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) {
    float v = gaussian_like();
    if (kind == 1) {
      uint32_t bits = next();
      if (((bits >> 23) & 0xFF) == 0xFF) bits &= ~(1u << 30);  // keep it finite
      std::memcpy(&v, &bits, 4);
    } else if (kind == 2) {
      const uint32_t pick = next() % 5;
      v = pick == 0 ? 0.0f : pick == 1 ? -0.0f : pick == 2 ? v * 1e-40f : pick == 3 ? v * 1e20f : v;
    } else if (kind == 3) {
      v = (next() & 1) ? -0.0f : 0.0f;
    } else if (kind == 4) {
      v = v * 1e30f + ((next() & 1) ? 3e38f : -3e38f);
    }
    row[size_t(i)] = v;
  }
  if (kind == 5) row[size_t(next() % uint32_t(d))] = (next() & 1) ? NAN : -INFINITY;
  return row;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The AVX-512 Hadamard rotation of the TQ3 kernels against HadamardRotation (the reference), bit for bit: same fp32
// operations per element in the same order, so every input, inf and NaN included, must give the same bits.
TEST(CpuSimdKernels, HadamardAvx512MatchesReferenceBits) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F on this machine";
#else
  GTEST_SKIP() << "the AVX-512 rotation is x86-64 only";
#endif
  uint32_t state = 777u;
  for (int d : {64, 128, 256}) {
    for (uint64_t seed : {HadamardRotation::kDefaultSeed, uint64_t(5)}) {
      HadamardRotation rotation;
      ASSERT_TRUE(HadamardRotation::Create(d, seed, &rotation).ok());
      for (int trial = 0; trial < 60; ++trial) {
        const int kind = trial % 6;
        const std::vector<float> x = SetupTestRow(d, kind, state);
        std::vector<float> want(static_cast<size_t>(d)), got(static_cast<size_t>(d), 1.0f), in_place = x;
        rotation.Forward(x.data(), want.data());
        cpu::HadamardForwardAvx512(rotation, x.data(), got.data());
        cpu::HadamardForwardAvx512(rotation, in_place.data(), in_place.data());
        for (int i = 0; i < d; ++i) {
          ASSERT_TRUE(SameBits(got[size_t(i)], want[size_t(i)]))
              << "forward d " << d << " kind " << kind << " i " << i << ": " << got[size_t(i)] << " vs "
              << want[size_t(i)];
          ASSERT_TRUE(SameBits(in_place[size_t(i)], want[size_t(i)])) << "forward in place, d " << d << " i " << i;
        }
        rotation.Inverse(x.data(), want.data());
        cpu::HadamardInverseAvx512(rotation, x.data(), got.data());
        in_place = x;
        cpu::HadamardInverseAvx512(rotation, in_place.data(), in_place.data());
        for (int i = 0; i < d; ++i) {
          ASSERT_TRUE(SameBits(got[size_t(i)], want[size_t(i)]))
              << "inverse d " << d << " kind " << kind << " i " << i << ": " << got[size_t(i)] << " vs "
              << want[size_t(i)];
          ASSERT_TRUE(SameBits(in_place[size_t(i)], want[size_t(i)])) << "inverse in place, d " << d << " i " << i;
        }
      }
    }
  }
}

// The AMX-INT8 TQ3 kernels' query digit tiles, vector code against the scalar reference, byte for byte (and the
// rows' fixed-point units bit for bit): every head_dim, narrow and wide task layouts, rows of every kind above,
// and a row whose fixed-point values are exact halves (score scale 1, max |x| = kQueryFixedMax: to_fixed = 1), so
// the round-half-to-even ties of lrint are hit.
TEST(CpuAmxKernels, Tq3QueryDigitsMatchScalarBytes) {
  if (!cpu::AmxInt8Usable()) GTEST_SKIP() << "no AMX-INT8 kernels on this machine";
  constexpr float kFixedMax = 8355711.0f;  // (127 * 256 + 127) * 256 + 127
  uint32_t state = 4242u;
  for (int d : {64, 128, 256}) {
    for (int rows : {1, 4, 5, 8, 9, 16}) {
      for (int trial = 0; trial < 8; ++trial) {
        std::vector<float> q;
        for (int r = 0; r < rows; ++r) {
          std::vector<float> row = SetupTestRow(d, (trial + r) % 6, state);
          if ((trial + r) % 7 == 6) {  // ties
            for (int i = 0; i < d; ++i) row[size_t(i)] = float(i % 9) - 4.0f + ((i % 2) ? 0.5f : -0.5f);
            row[size_t(d - 1)] = (trial % 2) ? kFixedMax : -kFixedMax;
          }
          q.insert(q.end(), row.begin(), row.end());
        }
        const bool ties = trial % 3 == 0;
        const float scale = ties ? 1.0f : 0.12751743f;  // log2(e) / sqrt(128)
        const size_t bytes = cpu::Tq3AmxQueryDigitBytes(rows, d);
        std::vector<int8_t> want(bytes, 1), got(bytes, 2);
        std::vector<float> want_scale(static_cast<size_t>(rows)), got_scale(static_cast<size_t>(rows));
        cpu::Tq3AmxQueryDigits(q.data(), rows, scale, d, true, want.data(), want_scale.data());
        cpu::Tq3AmxQueryDigits(q.data(), rows, scale, d, false, got.data(), got_scale.data());
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(int(got[i]), int(want[i])) << "d " << d << " rows " << rows << " trial " << trial << " byte " << i;
        }
        for (int r = 0; r < rows; ++r) {
          ASSERT_TRUE(SameBits(got_scale[size_t(r)], want_scale[size_t(r)]))
              << "d " << d << " rows " << rows << " row " << r;
        }
      }
    }
  }
}

// The dispatcher reports the family it runs per format; options choose it, force_scalar wins.
TEST(CpuAmxKernels, IsaNamesFollowOptions) {
  CpuAttentionOptions options;
  options.family = CpuKernelFamily::kAmx;
  const bool amx = cpu::AmxUsable();
  for (KvFormat format : {KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3}) {
    EXPECT_EQ(std::string(CpuKernelIsaFor(options, format)) == "amx", amx) << KvFormatName(format);
  }
  options.family = CpuKernelFamily::kAvx512;
  EXPECT_NE(std::string(CpuKernelIsa(options)), "amx");
  options.force_scalar = true;
  EXPECT_EQ(std::string(CpuKernelIsa(options)), "scalar");
  if (amx && std::getenv("MINIMAKV_CPU_ISA") == nullptr) {
    options = {};  // kAuto: AMX for FP8 and TQ3, AVX-512 for BF16
    EXPECT_EQ(std::string(CpuKernelIsaFor(options, KvFormat::kBf16)), "avx512");
    EXPECT_EQ(std::string(CpuKernelIsaFor(options, KvFormat::kFp8)), "amx");
    EXPECT_EQ(std::string(CpuKernelIsaFor(options, KvFormat::kTq3)), "amx");
    EXPECT_EQ(std::string(CpuKernelIsa(options)), "amx+avx512");
  }
}

// The TQ3 score variant follows CpuAttentionOptions::tq3_scores where the TQ3 tasks run on AMX, and is named
// "" where they do not.
TEST(CpuDispatch, Tq3ScoreVariantFollowsOptions) {
  CpuAttentionOptions options;
  options.family = CpuKernelFamily::kAvx512;
  options.tq3_scores = CpuTq3Scores::kInt8;
  EXPECT_STREQ(CpuTq3ScoresFor(options, 4, 128), "");
  EXPECT_FALSE(cpu::UseTq3Int8Scores(CpuTq3Scores::kInt8, KvFormat::kFp8, 4, 128));
  EXPECT_FALSE(cpu::UseTq3Int8Scores(CpuTq3Scores::kInt8, KvFormat::kBf16, 4, 128));
  if (!cpu::AmxInt8Usable()) GTEST_SKIP() << "no AMX-INT8 on this machine";
  options.family = CpuKernelFamily::kAmx;
  for (int d : {64, 128, 256}) {
    for (int group : {1, 4, 6, 16}) {
      options.tq3_scores = CpuTq3Scores::kInt8;
      EXPECT_STREQ(CpuTq3ScoresFor(options, group, d), "int8");
      options.tq3_scores = CpuTq3Scores::kBf16;
      EXPECT_STREQ(CpuTq3ScoresFor(options, group, d), "bf16");
      for (int rows : {1, 5, 16}) {
        EXPECT_EQ(cpu::SelectKernel(options, KvFormat::kTq3, rows, d), &cpu::AttendAmx);
        EXPECT_EQ(cpu::SelectKernel(options, KvFormat::kFp8, rows, d), &cpu::AttendAmx);
      }
    }
  }
}

// The TQ3 value variant follows CpuAttentionOptions::tq3_values where the TQ3 scores run on AMX-INT8, is bf16
// where they run on bf16 tiles, and "" where the TQ3 tasks do not run on AMX; kAuto keeps bf16 values.
TEST(CpuDispatch, Tq3ValueVariantFollowsOptions) {
  if (std::getenv("MINIMAKV_TQ3_VALUES") != nullptr) GTEST_SKIP() << "MINIMAKV_TQ3_VALUES replaces kAuto";
  CpuAttentionOptions options;
  options.family = CpuKernelFamily::kAvx512;
  options.tq3_scores = CpuTq3Scores::kInt8;
  options.tq3_values = CpuTq3Values::kInt8;
  EXPECT_STREQ(CpuTq3ValuesFor(options, 4, 128), "");
  EXPECT_FALSE(cpu::UseTq3Int8Values(CpuTq3Values::kInt8, CpuTq3Scores::kInt8, KvFormat::kFp8, 4, 128));
  EXPECT_FALSE(cpu::UseTq3Int8Values(CpuTq3Values::kInt8, CpuTq3Scores::kBf16, KvFormat::kTq3, 4, 128));
  if (!cpu::AmxInt8Usable()) GTEST_SKIP() << "no AMX-INT8 on this machine";
  options.family = CpuKernelFamily::kAmx;
  for (int d : {64, 128, 256}) {
    for (int group : {1, 4, 6, 16}) {
      options.tq3_scores = CpuTq3Scores::kInt8;
      options.tq3_values = CpuTq3Values::kInt8;
      EXPECT_STREQ(CpuTq3ValuesFor(options, group, d), "int8");
      EXPECT_STREQ(CpuTq3ScoresFor(options, group, d), "int8");
      options.tq3_values = CpuTq3Values::kAuto;  // int8 values by default since session 9
      EXPECT_STREQ(CpuTq3ValuesFor(options, group, d), "int8");
      options.tq3_values = CpuTq3Values::kBf16;
      EXPECT_STREQ(CpuTq3ValuesFor(options, group, d), "bf16");
      options.tq3_scores = CpuTq3Scores::kBf16;
      options.tq3_values = CpuTq3Values::kInt8;  // int8 values need int8 scores
      EXPECT_STREQ(CpuTq3ValuesFor(options, group, d), "bf16");
      for (int rows : {1, 5, 16}) {
        options.tq3_scores = CpuTq3Scores::kInt8;
        EXPECT_EQ(cpu::SelectKernel(options, KvFormat::kTq3, rows, d), &cpu::AttendAmxTq3Int8Values);
        EXPECT_EQ(cpu::SelectKernel(options, KvFormat::kFp8, rows, d), &cpu::AttendAmx);
        options.tq3_scores = CpuTq3Scores::kBf16;
        EXPECT_EQ(cpu::SelectKernel(options, KvFormat::kTq3, rows, d), &cpu::AttendAmx);
      }
    }
  }
}

// kAuto chooses per (format, query heads per KV head, head_dim) what the single-thread A/B measured faster
// (table in kernels/cpu/cpu_dispatch.cpp, ratios in docs/cpu-notes.md). Written out here
// independently of that table: the benchmark shapes (Llama-3-8B: group 4, d 128; Qwen3.6-27B: group 6, d 256)
// and the rows where the winner changes.
TEST(CpuDispatch, AutoChoosesPerShapeAsMeasured) {
  if (!cpu::AmxUsable()) GTEST_SKIP() << "kAuto only chooses between families on an AMX machine";
  if (std::getenv("MINIMAKV_CPU_ISA") != nullptr) GTEST_SKIP() << "MINIMAKV_CPU_ISA replaces kAuto";
  struct Expected {
    KvFormat format;
    int group;
    int head_dim;
    const char* isa;
  };
  const Expected expected[] = {
    {KvFormat::kBf16, 4, 128, "avx512"}, {KvFormat::kFp8, 4, 128, "amx"}, {KvFormat::kTq3, 4, 128, "amx"},  // Llama
    {KvFormat::kBf16, 6, 256, "avx512"}, {KvFormat::kFp8, 6, 256, "amx"},  {KvFormat::kTq3, 6, 256, "amx"},  // Qwen
    {KvFormat::kFp8, 1, 128, "avx512"},  {KvFormat::kFp8, 2, 128, "amx"},  {KvFormat::kFp8, 2, 256, "avx512"},
    {KvFormat::kFp8, 3, 64, "avx512"},   {KvFormat::kFp8, 3, 256, "amx"},  {KvFormat::kFp8, 8, 64, "amx"},
    {KvFormat::kFp8, 5, 256, "amx"},     {KvFormat::kFp8, 7, 256, "amx"},
    {KvFormat::kBf16, 1, 256, "amx"},    {KvFormat::kBf16, 4, 256, "amx"}, {KvFormat::kBf16, 5, 256, "avx512"},
    {KvFormat::kBf16, 8, 256, "avx512"}, {KvFormat::kBf16, 8, 64, "amx"},  {KvFormat::kBf16, 8, 128, "avx512"},
    {KvFormat::kTq3, 8, 128, "amx"},     {KvFormat::kTq3, 7, 256, "amx"},
    {KvFormat::kTq3, 1, 64, "avx512"},   {KvFormat::kTq3, 1, 128, "avx512"}, {KvFormat::kTq3, 1, 256, "avx512"},
    {KvFormat::kTq3, 2, 64, "amx"},      {KvFormat::kTq3, 2, 256, "amx"},
  };
  // The table above is for TQ3 with bf16 scores; with int8 scores (the default where the machine has AMX-INT8)
  // every TQ3 task runs AMX, row 1 included (session 8: AMX int8 0.79-0.92x the AVX-512 time at row 1).
  CpuAttentionOptions bf16_scores;  // kAuto family
  bf16_scores.tq3_scores = CpuTq3Scores::kBf16;
  for (const Expected& e : expected) {
    EXPECT_STREQ(CpuKernelIsaFor(bf16_scores, e.format, e.group, e.head_dim), e.isa)
        << KvFormatName(e.format) << " group " << e.group << " d " << e.head_dim;
  }
  const CpuAttentionOptions options;  // kAuto
  const bool int8 = cpu::AmxInt8Usable();
  for (const Expected& e : expected) {
    const char* want = e.format == KvFormat::kTq3 && int8 ? "amx" : e.isa;
    EXPECT_STREQ(CpuKernelIsaFor(options, e.format, e.group, e.head_dim), want)
        << KvFormatName(e.format) << " group " << e.group << " d " << e.head_dim;
  }
  for (int d : {64, 128, 256}) {
    for (int group : {1, 4, 6, 8, 16}) {
      EXPECT_STREQ(CpuTq3ScoresFor(options, group, d), int8 ? "int8" : "bf16") << "group " << group << " d " << d;
    }
  }
  // Groups of 9-16 run one AMX task per group (Qwen3-235B-A22B: group 16, d 128; GLM-4.5: 12); with
  // max_task_rows 8 they run tasks of 8 rows: the same choice as group 8.
  for (KvFormat format : {KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3}) {
    for (int d : {64, 128, 256}) {
      for (int group : {9, 12, 16}) {
        EXPECT_STREQ(CpuKernelIsaFor(options, format, group, d), "amx") << KvFormatName(format) << " group " << group;
      }
      CpuAttentionOptions narrow = options;
      narrow.max_task_rows = cpu::kNarrowTaskRows;
      EXPECT_STREQ(CpuKernelIsaFor(narrow, format, 16, d), CpuKernelIsaFor(options, format, 8, d));
    }
  }
  // The two-argument form is the Llama-3-8B decode shape.
  for (KvFormat format : {KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3}) {
    EXPECT_STREQ(CpuKernelIsaFor(options, format), CpuKernelIsaFor(options, format, kLlamaDecodeGroup, kLlamaHeadDim));
  }
}

// The same sequences split across BF16, FP8 and TQ3 views: merged result vs the reference over the union.
TEST(CpuAttention, MixedViewsMergeToReferenceOverUnion) {
  constexpr int kHeadDim = 128;
  constexpr int kKvHeads = 2;
  constexpr int kGroup = 4;
  constexpr int kPageTokens = 32;
  const std::vector<int64_t> lengths = {700, 45, 0, 300};
  const DenseBatch batch = MakeBatch(lengths, kKvHeads, kHeadDim, 31);
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(kHeadDim, HadamardRotation::kDefaultSeed, &rotation).ok());
  // Sequence 0: BF16 [0,64), FP8 [64,192) + [640,700), TQ3 [192,640). Sequence 1: FP8 only. Sequence 3: TQ3
  // [0,256) + BF16 [256,300).
  const std::vector<std::vector<TokenRange>> bf16_ranges = {{{0, 64}}, {}, {}, {{256, 300}}};
  const std::vector<std::vector<TokenRange>> fp8_ranges = {{{64, 192}, {640, 700}}, {{0, 45}}, {}, {}};
  const std::vector<std::vector<TokenRange>> tq3_ranges = {{{192, 640}}, {}, {}, {{0, 256}}};
  SyntheticPool bf16, fp8, tq3;
  ASSERT_TRUE(BuildSyntheticPool({KvFormat::kBf16, kKvHeads, kHeadDim, kPageTokens}, &rotation, bf16_ranges,
                                 SourceOf(batch), 1, &bf16).ok());
  ASSERT_TRUE(BuildSyntheticPool({KvFormat::kFp8, kKvHeads, kHeadDim, kPageTokens}, &rotation, fp8_ranges,
                                 SourceOf(batch), 2, &fp8).ok());
  ASSERT_TRUE(BuildSyntheticPool({KvFormat::kTq3, kKvHeads, kHeadDim, kPageTokens}, &rotation, tq3_ranges,
                                 SourceOf(batch), 3, &tq3).ok());
  const PagedKvView views[] = {bf16.View(), fp8.View(), tq3.View()};
  const QueryBatch qb = MakeQueries({1, 2, 1, 1}, kKvHeads * kGroup, kHeadDim, 3.0f, 41);
  const AttentionQueries queries = qb.Queries(kKvHeads * kGroup, kHeadDim);
  std::vector<double> want_out, want_lse;
  ASSERT_TRUE(ReferenceAttention(views, queries, &rotation, &want_out, &want_lse).ok());
  for (const std::string isa : {"auto", "amx", "avx512", "scalar", "amx/i8", "auto/i8", "amx/i8v", "auto/i8v"}) {
    CpuAttentionOptions options;
    if (isa != "auto" && !OptionsForIsa(isa, &options)) continue;
    GuardedBuffer out(want_out.size());
    GuardedBuffer lse(want_lse.size());
    options.num_threads = 2;
    const Status status = AttendMixedCpu(views, queries, &rotation, out.data(), lse.data(), options);
    ASSERT_TRUE(status.ok()) << status.ToString();
    ExpectMatchesReference(out.data(), lse.data(), want_out, want_lse, CpuKernelIsa(options));
    EXPECT_TRUE(out.CanariesIntact());
    EXPECT_TRUE(lse.CanariesIntact());
    // lse_log2 may be null.
    GuardedBuffer out_only(want_out.size());
    ASSERT_TRUE(AttendMixedCpu(views, queries, &rotation, out_only.data(), nullptr, options).ok());
    EXPECT_EQ(std::memcmp(out_only.data(), out.data(), want_out.size() * sizeof(float)), 0);
    EXPECT_TRUE(out_only.CanariesIntact());
    // On persistent pools: two threads run the same tasks as above (the same bits), three split differently.
    for (int pool_threads : {2, 3}) {
      ThreadPool thread_pool(pool_threads);
      CpuAttentionOptions pooled = options;
      pooled.pool = &thread_pool;
      GuardedBuffer out_pooled(want_out.size());
      GuardedBuffer lse_pooled(want_lse.size());
      ASSERT_TRUE(AttendMixedCpu(views, queries, &rotation, out_pooled.data(), lse_pooled.data(), pooled).ok());
      const std::string what = std::string(CpuKernelIsa(options)) + " on a pool of " + std::to_string(pool_threads);
      ExpectMatchesReference(out_pooled.data(), lse_pooled.data(), want_out, want_lse, what);
      if (pool_threads == 2) {
        EXPECT_EQ(std::memcmp(out_pooled.data(), out.data(), want_out.size() * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(lse_pooled.data(), lse.data(), want_lse.size() * sizeof(float)), 0) << what;
      }
      EXPECT_TRUE(out_pooled.CanariesIntact());
      EXPECT_TRUE(lse_pooled.CanariesIntact());
    }
  }
}

// ---- argument validation ----
class CpuAttentionErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(HadamardRotation::Create(64, 1, &rotation_).ok());
    batch_ = MakeBatch({20}, 2, 64, 3);
    ASSERT_TRUE(BuildSyntheticPool({KvFormat::kTq3, 2, 64, 16}, &rotation_, WholeSequences({20}), SourceOf(batch_), 0,
                                   &pool_).ok());
    qb_ = MakeQueries({1}, 4, 64, 1.0f, 4);
    out_.resize(4 * 64);
    lse_.resize(4);
  }
  Status Run(const PagedKvView& view, const AttentionQueries& queries, const HadamardRotation* rotation) {
    return ComputePartialStatesCpu(view, queries, rotation, {out_.data(), lse_.data()}, {});
  }
  HadamardRotation rotation_;
  DenseBatch batch_;
  SyntheticPool pool_;
  QueryBatch qb_;
  std::vector<float> out_, lse_;
};

TEST_F(CpuAttentionErrors, RejectsBadArgumentsWithClearMessages) {
  const PagedKvView view = pool_.View();
  const AttentionQueries queries = qb_.Queries(4, 64);
  ASSERT_TRUE(Run(view, queries, &rotation_).ok());

  Status s = Run(view, queries, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rotation"), std::string::npos) << s.message();

  HadamardRotation other;
  ASSERT_TRUE(HadamardRotation::Create(128, 1, &other).ok());
  s = Run(view, queries, &other);
  EXPECT_NE(s.message().find("head_dim 128"), std::string::npos) << s.message();

  AttentionQueries bad_heads = queries;
  bad_heads.num_q_heads = 3;
  s = Run(view, bad_heads, &rotation_);
  EXPECT_NE(s.message().find("num_q_heads 3"), std::string::npos) << s.message();

  PagedKvView bad_dim = view;
  bad_dim.layout.head_dim = 96;
  s = Run(bad_dim, queries, &rotation_);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("96"), std::string::npos) << s.message();

  PagedKvView null_pages = view;
  null_pages.pages = nullptr;
  EXPECT_NE(Run(null_pages, queries, &rotation_).message().find("view.pages"), std::string::npos);

  const int32_t bad_last[] = {17};
  PagedKvView bad_last_view = view;
  bad_last_view.last_page_tokens = bad_last;
  EXPECT_NE(Run(bad_last_view, queries, &rotation_).message().find("last_page_tokens[0] = 17"), std::string::npos);

  AttentionQueries null_q = queries;
  null_q.q = nullptr;
  EXPECT_NE(Run(view, null_q, &rotation_).message().find("queries.q is null"), std::string::npos);

  EXPECT_EQ(ComputePartialStatesCpu(view, queries, &rotation_, {nullptr, lse_.data()}, {}).code(),
            StatusCode::kInvalidArgument);
  CpuAttentionOptions zero_threads;
  zero_threads.num_threads = 0;
  EXPECT_NE(ComputePartialStatesCpu(view, queries, &rotation_, {out_.data(), lse_.data()}, zero_threads)
                .message()
                .find("num_threads 0"),
            std::string::npos);
  // More threads than any machine runs: an error, not an attempt to start them (a refused thread used to end the
  // process with std::system_error).
  CpuAttentionOptions too_many_threads;
  too_many_threads.num_threads = kMaxThreads + 1;
  EXPECT_NE(ComputePartialStatesCpu(view, queries, &rotation_, {out_.data(), lse_.data()}, too_many_threads)
                .message()
                .find("num_threads " + std::to_string(kMaxThreads + 1)),
            std::string::npos);
  for (int bad_rows : {0, cpu::kMaxTaskRows + 1}) {
    CpuAttentionOptions bad_task_rows;
    bad_task_rows.max_task_rows = bad_rows;
    EXPECT_NE(ComputePartialStatesCpu(view, queries, &rotation_, {out_.data(), lse_.data()}, bad_task_rows)
                  .message()
                  .find("max_task_rows " + std::to_string(bad_rows)),
              std::string::npos);
  }
}

// ---- merge ----
constexpr int kMergeDim = 8;

std::vector<float> Vec(float base) {
  std::vector<float> v(kMergeDim);
  for (int i = 0; i < kMergeDim; ++i) v[size_t(i)] = base + 0.25f * float(i);
  return v;
}

TEST(MergePartialState, EmptyWithEmptyStaysEmptyWithZeroOutput) {
  std::vector<float> a(kMergeDim, NAN);  // garbage in an empty state must not leak
  float lse_a = -INFINITY;
  const std::vector<float> b(kMergeDim, NAN);
  MergePartialState(a.data(), &lse_a, b.data(), -INFINITY, kMergeDim);
  EXPECT_EQ(lse_a, -INFINITY);
  for (float x : a) EXPECT_EQ(x, 0.0f);
}

TEST(MergePartialState, EmptySideLeavesTheOtherExactly) {
  std::vector<float> a = Vec(1.0f);
  float lse_a = 3.5f;
  const std::vector<float> empty(kMergeDim, NAN);
  MergePartialState(a.data(), &lse_a, empty.data(), -INFINITY, kMergeDim);
  EXPECT_EQ(lse_a, 3.5f);
  EXPECT_EQ(a, Vec(1.0f));
  std::vector<float> c(kMergeDim, NAN);
  float lse_c = -INFINITY;
  const std::vector<float> b = Vec(-2.0f);
  MergePartialState(c.data(), &lse_c, b.data(), -7.25f, kMergeDim);
  EXPECT_EQ(lse_c, -7.25f);
  EXPECT_EQ(c, b);
}

TEST(MergePartialState, PlusInfinityWins) {
  std::vector<float> a = Vec(1.0f);
  float lse_a = 10.0f;
  const std::vector<float> b = Vec(5.0f);
  MergePartialState(a.data(), &lse_a, b.data(), INFINITY, kMergeDim);
  EXPECT_EQ(lse_a, INFINITY);
  EXPECT_EQ(a, Vec(5.0f));
  // +inf with +inf: the average of the two outputs.
  std::vector<float> c = Vec(1.0f);
  float lse_c = INFINITY;
  MergePartialState(c.data(), &lse_c, b.data(), INFINITY, kMergeDim);
  EXPECT_EQ(lse_c, INFINITY);
  for (int i = 0; i < kMergeDim; ++i) EXPECT_EQ(c[size_t(i)], (Vec(1.0f)[size_t(i)] + b[size_t(i)]) * 0.5f);
}

TEST(MergePartialState, EqualWeightsAverage) {
  std::vector<float> a = Vec(1.0f);
  float lse_a = 2.0f;
  const std::vector<float> b = Vec(3.0f);
  MergePartialState(a.data(), &lse_a, b.data(), 2.0f, kMergeDim);
  EXPECT_EQ(lse_a, 3.0f);  // log2(2^2 + 2^2)
  for (int i = 0; i < kMergeDim; ++i) EXPECT_EQ(a[size_t(i)], Vec(2.0f)[size_t(i)]);
}

TEST(MergePartialState, CommutativeExactlyAndAssociativeWithinRounding) {
  GaussianSource gauss(77);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(kMergeDim), y(kMergeDim), z(kMergeDim);
    gauss.Fill(x.data(), kMergeDim);
    gauss.Fill(y.data(), kMergeDim);
    gauss.Fill(z.data(), kMergeDim);
    const float lx = 4.0f * gauss.Next(), ly = 4.0f * gauss.Next(), lz = 4.0f * gauss.Next();
    std::vector<float> xy = x, yx = y;
    float lxy = lx, lyx = ly;
    MergePartialState(xy.data(), &lxy, y.data(), ly, kMergeDim);
    MergePartialState(yx.data(), &lyx, x.data(), lx, kMergeDim);
    ASSERT_EQ(lxy, lyx);
    ASSERT_EQ(std::memcmp(xy.data(), yx.data(), sizeof(float) * kMergeDim), 0);
    // (x + y) + z vs x + (y + z)
    std::vector<float> left = xy;
    float l_left = lxy;
    MergePartialState(left.data(), &l_left, z.data(), lz, kMergeDim);
    std::vector<float> yz = y;
    float lyz = ly;
    MergePartialState(yz.data(), &lyz, z.data(), lz, kMergeDim);
    std::vector<float> right = x;
    float l_right = lx;
    MergePartialState(right.data(), &l_right, yz.data(), lyz, kMergeDim);
    ASSERT_NEAR(l_left, l_right, 1e-6 * std::fmax(1.0f, std::fabs(l_left)));
    for (int i = 0; i < kMergeDim; ++i) {
      ASSERT_NEAR(left[size_t(i)], right[size_t(i)], 1e-6 * std::fmax(1.0f, std::fabs(left[size_t(i)])));
    }
  }
}

TEST(MergePartialStatesCpu, MergesArraysAndRejectsMismatch) {
  std::vector<float> a = Vec(0.0f), b = Vec(1.0f);
  std::vector<float> la = {1.0f}, lb = {1.0f};
  float* const outs[] = {a.data(), b.data()};
  float* const lses[] = {la.data(), lb.data()};
  ASSERT_TRUE(MergePartialStatesCpu(outs, lses, 1, kMergeDim).ok());
  EXPECT_EQ(la[0], 2.0f);
  for (int i = 0; i < kMergeDim; ++i) EXPECT_EQ(a[size_t(i)], Vec(0.5f)[size_t(i)]);
  float* const one_lse[] = {la.data()};
  EXPECT_EQ(MergePartialStatesCpu(outs, one_lse, 1, kMergeDim).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace minimakv
