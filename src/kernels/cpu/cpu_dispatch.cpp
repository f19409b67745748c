// The one place that decides which CPU kernel family runs for a task. Supported families: AMX when the CPU
// has it and the OS granted tile state (kernels/cpu/cpu_kernels_amx.cpp), AVX-512 when the CPU reports every
// feature that translation unit was compiled for (kernels/cpu/cpu_kernels_avx512.cpp), the scalar kernels
// always. "Is it supported" and "what runs" come from the same function (UsableIsa).
//
// CpuKernelFamily::kAuto picks AMX or AVX-512 per (format, task rows, head_dim) from kAutoTable below: what
// measured faster on this project's AMX machine (Xeon, AVX-512 + AMX-BF16 + GFNI) in a single-thread
// interleaved A/B of the two kernels on the same pages (16K tokens x 8 KV heads, caches flushed before each
// run, thread CPU time, median of per-round ratios; docs/cpu-notes.md has the command and every
// ratio). A task's rows are its query heads of one GQA group (decode) or several tokens' groups (up to 8), or
// one GQA group of 9-16 heads (AMX and scalar only; TaskRowsFor decides the rows, SelectIsa the family).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "kernels/cpu/cpu_kernels.h"

namespace minimakv::cpu {
namespace {

bool CpuHasAvx512Kernels() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  }();
  return has;
#else
  return false;
#endif
}

// The value of environment variable `name` among `choices` (name, value); unset or unrecognized: `fallback`.
template <typename Choice>
Choice EnvironmentChoice(const char* name, std::initializer_list<std::pair<const char*, Choice>> choices,
                         Choice fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr) return fallback;
  for (const auto& [text, choice] : choices) {
    if (std::strcmp(value, text) == 0) return choice;
  }
  return fallback;
}

// MINIMAKV_CPU_ISA replaces CpuKernelFamily::kAuto for the whole process; unset or unrecognized: kAuto.
CpuKernelFamily EnvironmentFamily() {
  static const CpuKernelFamily family = EnvironmentChoice<CpuKernelFamily>(
      "MINIMAKV_CPU_ISA",
      {{"scalar", CpuKernelFamily::kScalar}, {"avx512", CpuKernelFamily::kAvx512}, {"amx", CpuKernelFamily::kAmx}},
      CpuKernelFamily::kAuto);
  return family;
}

// CpuTq3Scores::kAuto: TQ3 scores on AMX-INT8 wherever the machine has it. Session 8 (docs/cpu-notes.md):
// interleaved single-thread A/B, same binary, AMX with int8 scores over AMX with bf16 scores, thread
// CPU time, median of 16 rounds (16K tokens x 8 KV heads, caches flushed), rows 1..8:
//   d 64   0.84 0.90 0.92 0.93 0.92 0.89 0.90 0.93
//   d 128  0.83 0.87 0.89 0.93 0.92 0.80 0.82 0.96   (rows 4: 0.94, 0.936 in 16 and 30 more rounds)
//   d 256  0.87 0.84 0.86 0.84 0.85 0.82 0.81 0.82   (rows 6: 0.84 in 30 more rounds)
//   rows 16, d 128: 0.92
// and `minimakv bench --isa auto/bf16,auto/i8` at the Llama and Qwen3.6 shapes (32K, 2 threads) likewise.
constexpr bool kTq3Int8ScoresByDefault = true;

// CpuTq3Values::kAuto: TQ3 values on AMX-INT8 (AttendAmxTq3Int8Values) wherever the scores are int8. Session 9
// (docs/BENCHMARKS.md section 3, "Session 9"): interleaved in-process A/B, same binary, int8 values over bf16
// values (both with int8 scores), 16K tokens x 8 KV heads, caches flushed, one thread, median of 20 rounds:
//   d 128 rows 1, 2, 4, 8, 16: 0.91 0.92 0.92-0.96 0.90 0.76;  d 64 rows 4: 0.92;  d 256 rows 4: 0.98, rows 6: 0.87-0.89
// two threads, 32K tokens, rows 4 d 128, wall: 0.85-0.97 (4 runs); and `minimakv bench` (Llama 32K, 2 threads,
// processes alternated with MINIMAKV_TQ3_VALUES) likewise.
constexpr bool kTq3Int8ValuesByDefault = true;

// MINIMAKV_TQ3_VALUES (bf16 | int8) replaces CpuTq3Values::kAuto for the whole process; unset or unrecognized: kAuto.
CpuTq3Values EnvironmentTq3Values() {
  static const CpuTq3Values values = EnvironmentChoice<CpuTq3Values>(
      "MINIMAKV_TQ3_VALUES", {{"bf16", CpuTq3Values::kBf16}, {"int8", CpuTq3Values::kInt8}}, CpuTq3Values::kAuto);
  return values;
}

// kAuto on a machine with both families: AMX (A) or AVX-512 (V) per format, head_dim and task rows 1..8.
// Single-thread A/B, AMX time / AVX-512 time (< 1: AMX faster), runs of 18:14-18:38 UTC
// at commits 9797555 / 068ec46, several runs per cell where close
// (docs/cpu-notes.md):
//   rows 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 ("-": not measured)
//   bf16 d64   1.13 1.11 | 1.14 1.09 | - | 1.04 1.04 | - | 1.24 0.99 | - | 0.87 0.98 0.97
//   bf16 d128  1.02 0.97 | 1.15 1.07 | - | 1.04 1.02 | - | 1.21 1.05 | - | 1.08 0.91 0.98
//   bf16 d256  0.93 0.89 | 0.94 0.99 0.92 | - | 0.97 0.96 | - | 1.27 1.00 1.11 | - | 1.01 0.86 0.98
//   fp8  d64   1.08 1.15 | 1.22 1.14 | 1.07 1.01 | 0.98 0.82 | 0.66 | 1.10 0.85 0.86 | 0.90 | 0.77 0.83
//   fp8  d128  1.08 1.00 1.10 | 1.17 0.95 0.96 | 0.86 | 0.88 0.86 | 0.71 | 0.94 0.91 | 0.84 | 0.88 0.74
//   fp8  d256  1.07 1.04 | 1.09 1.21 | 1.00 1.01 | 0.98 0.97 | 0.76 | 1.13 0.89 0.87 | 1.11 0.81 | 0.83 0.76
//   tq3  d64   0.88 0.84 | 0.80 | 0.76 | 0.61 | 0.74 | 0.97 0.93 | 0.92 | 0.86
//   tq3  d128  0.79 0.79 | 0.73 | 0.62 | 0.59 | 0.72 | 0.69 0.97 0.67 | 0.98 0.70 | 0.89 0.84
//   tq3  d256  0.66 0.66 | 0.66 | 0.57 | 0.75 | 0.71 | 0.65 0.65 | 0.90 | 0.57
// TQ3 again after the nibble layout (session 6, 00:37-00:41 UTC, commit c5b0f91 kernels; its AVX-512 unpack lost
// 3 vector ops per 32 coordinates, the AMX expansion gained one per 64; 12-30 rounds per run):
//   tq3  d64   1.04 1.13 | 0.99 | - | - | - | - | - | -
//   tq3  d128  1.07 1.08 | 1.01 | - | 0.79 | - | - | - | 0.71
//   tq3  d256  1.06 1.05 | 0.99 | - | - | - | - | - | -
// Rule: a cell leaves the family auto ran before (AVX-512 for BF16, AMX for FP8 and TQ3) only when the median
// of its runs (of two: the mean) is at least 3% (the A/B noise) in favour of the other; an unmeasured row
// (BF16 3, 5, 7) takes the neighbour that keeps the previous family. FP8 at the Qwen3.6-27B shape (rows 6,
// d 256) ran AVX-512 by an override from session 7 to session 10, because bench runs with all four paths
// interleaved had AMX FP8 slower then (docs/cpu-notes.md). Session 11 (docs/BENCHMARKS.md section 3), `minimakv
// bench --shape qwen3.6-27b --context 32768 --threads 2 --isa avx512,amx`, all paths interleaved, 14:00 UTC: AMX
// FP8 0.86-0.90 of the AVX-512 FP8 time at batch 1 (3 runs; 1.08-1.16x the BF16 speed) but 1.04-1.08 at batch 4
// (2 runs), and the Minima path with its FP8 pages on AMX too 0.74-0.95 of its time with them on AVX-512 (5 runs,
// batch 1); so the letter is A again (batch 1 and the Minima path weigh more than FP8 alone at batch 4).
// Decode rows
// = the GQA group: Llama-3-8B (group 4, d 128) runs AVX-512 BF16 and AMX FP8 / TQ3 as before, Qwen3.6-27B
// AVX-512 BF16, AMX FP8 and TQ3. Other changes: FP8 row 1 at d 128, rows 1-3 at d 64 and rows 1-2 at d 256 to
// AVX-512; BF16 rows 1-4 at d 256 and row 8 at d 64 to AMX; since session 6 TQ3 row 1 (every head_dim) to
// AVX-512 (these TQ3 letters hold for bf16 scores; with int8 scores, the default since session 8, every TQ3
// row runs AMX: AutoIsa).
// Rows 9..16 (GQA groups of 9-16 as one task, AMX only: the other families cut them into tasks of 8, see
// TaskRowsFor): one letter per (format, head_dim), so every piece of a group above 16 (16 + remainder) runs
// the same family. Measured at the Qwen3-235B shape (group 16, d 128), `minimakv bench --shape qwen3-235b
// --context 32768 --batch 1,4 --threads 2 --isa amx:8,avx512,amx --paths bf16,fp8,tq3` (03:54 UTC, load ~1.0),
// us per step, batch 1 | batch 4:
//   amx, 16-row tasks   bf16 4932 | 20523   fp8 5015 | 17185   tq3 4569 | 15537
//   amx, tasks of 8     bf16 6862 | 27128   fp8 5745 | 22929   tq3 5334 | 18206
//   avx512 (8 rows)     bf16 9165 | 29606   fp8 10335 | 34147  tq3 6232 | 24368
// so 'A' for every format at d 128 (BF16 too, whose rows 1..8 run AVX-512). d 64 and d 256 follow d 128 (not
// measured: one 16-row AMX task reads and converts each key and value once instead of twice, and its 48 score
// columns / weight rows take 3 C tiles per product where two tasks of 8 take 2 + 2).
constexpr int kTableRows = kMaxTaskRows;
constexpr char kAutoTable[3][3][kTableRows + 1] = {
    // rows 1..8 | 9..16, per head_dim 64 / 128 / 256
    {"VVVVVVVAAAAAAAAA", "VVVVVVVVAAAAAAAA", "AAAAVVVVAAAAAAAA"},  // bf16
    {"VVVAAAAAAAAAAAAA", "VAAAAAAAAAAAAAAA", "VVAAAAAAAAAAAAAA"},  // fp8
    {"VAAAAAAAAAAAAAAA", "VAAAAAAAAAAAAAAA", "VAAAAAAAAAAAAAAA"},  // tq3
};
// (format, head_dim, rows) -> the family kAutoTable names; head_dim outside 64/128/256 or rows outside
// 1..kMaxTaskRows take the nearest entry (the driver never passes them: CheckHeadDim, TaskRowsFor). TQ3 tasks
// whose scores run on AMX-INT8 (UseTq3Int8Scores) take AMX at every row count: session 8 (docs/cpu-notes.md)
// measured AMX with int8 scores at 0.80-0.96x the time of AMX with bf16 scores at rows 1-8 and
// d 64/128/256, and at 0.79-0.92x the AVX-512 time at row 1 (where AMX with bf16 scores took 1.04-1.13x).
CpuIsa AutoIsa(KvFormat format, int rows, int head_dim, CpuTq3Scores tq3_scores) {
  if (UseTq3Int8Scores(tq3_scores, format, rows, head_dim)) return CpuIsa::kAmx;
  const int format_index = format == KvFormat::kBf16 ? 0 : format == KvFormat::kFp8 ? 1 : 2;
  const int dim_index = head_dim <= 64 ? 0 : head_dim <= 128 ? 1 : 2;
  const int row_index = std::clamp(rows, 1, kTableRows) - 1;
  return kAutoTable[format_index][dim_index][row_index] == 'A' ? CpuIsa::kAmx : CpuIsa::kAvx512;
}

// The family asked for (the table for kAuto), before the row limit of SelectIsa.
CpuIsa WantedIsa(CpuKernelFamily family, bool force_scalar, KvFormat format, int rows, int head_dim,
                 CpuTq3Scores tq3_scores) {
  if (force_scalar) family = CpuKernelFamily::kScalar;
  if (family == CpuKernelFamily::kAuto) family = EnvironmentFamily();
  switch (family) {
    case CpuKernelFamily::kAuto: return UsableIsa(AutoIsa(format, rows, head_dim, tq3_scores));
    case CpuKernelFamily::kAmx: return UsableIsa(CpuIsa::kAmx);
    case CpuKernelFamily::kAvx512: return UsableIsa(CpuIsa::kAvx512);
    case CpuKernelFamily::kScalar: break;
  }
  return CpuIsa::kScalar;
}

}  // namespace

CpuIsa UsableIsa(CpuIsa wanted) {
  // AmxUsable() asks the OS for tile state, so it is only called when AMX may run.
  if (wanted == CpuIsa::kAmx && CpuHasAvx512Kernels() && AmxUsable()) return CpuIsa::kAmx;
  if (wanted >= CpuIsa::kAvx512 && CpuHasAvx512Kernels()) return CpuIsa::kAvx512;
  return CpuIsa::kScalar;
}

int MaxTaskRowsOf(CpuIsa isa) { return isa == CpuIsa::kAvx512 ? kMaxAvx512TaskRows : kMaxTaskRows; }

CpuIsa SelectIsa(CpuKernelFamily family, bool force_scalar, KvFormat format, int rows, int head_dim,
                 CpuTq3Scores tq3_scores) {
  const CpuIsa isa = WantedIsa(family, force_scalar, format, rows, head_dim, tq3_scores);
  // TaskRowsFor never plans more rows than the chosen family takes; should a caller pass more, the scalar
  // kernels (any row count) answer rather than a kernel that would drop rows.
  return rows <= MaxTaskRowsOf(isa) ? isa : CpuIsa::kScalar;
}

int TaskRowsFor(CpuKernelFamily family, bool force_scalar, KvFormat format, int group, int head_dim,
                int max_task_rows, CpuTq3Scores tq3_scores) {
  const int cap = std::clamp(max_task_rows, 1, kMaxTaskRows);
  // Whole groups of consecutive tokens while one fits in `limit` rows, else pieces of `limit` heads.
  auto whole_groups = [&](int limit) { return group <= limit ? limit / group * group : limit; };
  const int narrow = whole_groups(std::min(cap, kNarrowTaskRows));
  if (group <= kNarrowTaskRows) return narrow;
  const int wide = whole_groups(cap);
  if (wide <= narrow) return narrow;
  return wide <= MaxTaskRowsOf(WantedIsa(family, force_scalar, format, wide, head_dim, tq3_scores)) ? wide : narrow;
}

KernelFn KernelFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return &AttendAmx;
    case CpuIsa::kAvx512: return &AttendAvx512;
    case CpuIsa::kScalar: break;
  }
  return &AttendScalar;
}

bool UseTq3Int8Scores(CpuTq3Scores wanted, KvFormat format, [[maybe_unused]] int rows, [[maybe_unused]] int head_dim) {
  // rows and head_dim do not enter yet: int8 scores measured faster at every shape (kTq3Int8ScoresByDefault).
  if (format != KvFormat::kTq3 || !AmxInt8Usable()) return false;
  switch (wanted) {
    case CpuTq3Scores::kBf16: return false;
    case CpuTq3Scores::kInt8: return true;
    case CpuTq3Scores::kAuto: break;
  }
  return kTq3Int8ScoresByDefault;
}

bool UseTq3Int8Values(CpuTq3Values wanted, CpuTq3Scores scores, KvFormat format, int rows, int head_dim) {
  // The int8 value pass lives in the int8-score kernel only (one more template flag, not a fourth kernel).
  if (!UseTq3Int8Scores(scores, format, rows, head_dim)) return false;
  if (wanted == CpuTq3Values::kAuto) wanted = EnvironmentTq3Values();
  switch (wanted) {
    case CpuTq3Values::kBf16: return false;
    case CpuTq3Values::kInt8: return true;
    case CpuTq3Values::kAuto: break;
  }
  return kTq3Int8ValuesByDefault;
}

KernelFn SelectKernel(const CpuAttentionOptions& options, KvFormat format, int rows, int head_dim) {
  const CpuIsa isa = SelectIsa(options.family, options.force_scalar, format, rows, head_dim, options.tq3_scores);
  if (isa == CpuIsa::kAmx && UseTq3Int8Scores(options.tq3_scores, format, rows, head_dim)) {
    return UseTq3Int8Values(options.tq3_values, options.tq3_scores, format, rows, head_dim) ? &AttendAmxTq3Int8Values
                                                                                             : &AttendAmxTq3Int8;
  }
  return KernelFor(isa);
}

const char* IsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return "amx";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kScalar: break;
  }
  return "scalar";
}

}  // namespace minimakv::cpu
