// Private interface between the CPU attention driver (cpu_attention.cpp) and the per-ISA kernels.
// One task = one KV head of one sequence, a range of its pages in one view, and up to kMaxTaskRows query rows
// (query token x query head of the GQA group) that share every unpacked key and value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "minimakv/cpu_attention.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/kv_format.h"
#include "minimakv/paged_kv_view.h"

namespace minimakv::cpu {

// Rows per task: a GQA group of up to 16 query heads for one token (decode), or several tokens' groups. Each
// family has its own limit (MaxTaskRowsOf): AMX and scalar take up to 16 (an AMX tile has 16 rows), AVX-512 up
// to 8 (its accumulators are registers and L1 rows per query row; 16 rows would not pay there). The planner
// (cpu_attention.cpp) asks TaskRowsFor, next to SelectIsa, how many rows a view's tasks get.
inline constexpr int kMaxTaskRows = 16;
inline constexpr int kMaxAvx512TaskRows = 8;
// Tasks of GQA groups up to this size keep the rows they had before 16-row tasks (whole groups within 8 rows):
// the dispatch table for rows 1..8 was measured with them.
inline constexpr int kNarrowTaskRows = 8;

struct KernelTask {
  const PagedKvView* view = nullptr;
  int kv_head = 0;
  const int32_t* page_ids = nullptr;  // [num_pages] physical ids to read
  int num_pages = 0;
  int last_page_tokens = 0;           // valid tokens of page_ids[num_pages - 1]
  int num_rows = 0;                   // 1..kMaxTaskRows
  const float* q_rows[kMaxTaskRows] = {};  // [head_dim] each, original domain
  float* out_rows[kMaxTaskRows] = {};      // [head_dim] each: normalized output, original domain
  float* lse_rows[kMaxTaskRows] = {};      // one float each: base-2 LSE
  float score_scale_log2 = 0.0f;           // sm_scale * log2(e): turns q.k into a base-2 score
  const HadamardRotation* rotation = nullptr;  // TQ3 only
};

// Writes the partial state of every row of the task (the empty state when num_pages == 0).
using KernelFn = void (*)(const KernelTask& task);

// Portable kernels (kernels/cpu/cpu_kernels_scalar.cpp): the reference the SIMD ones are tested against.
void AttendScalar(const KernelTask& task);

// AVX-512 kernels (kernels/cpu/cpu_kernels_avx512.cpp), only called when the CPU has the features.
void AttendAvx512(const KernelTask& task);

// AMX kernels (kernels/cpu/cpu_kernels_amx.cpp), only called when AmxUsable().
void AttendAmx(const KernelTask& task);
// The AMX TQ3 kernel with scores on AMX-INT8 (TDPBSSD; values as AttendAmx), only called when AmxInt8Usable().
void AttendAmxTq3Int8(const KernelTask& task);
// The same with the values on AMX-INT8 too (TDPBUSD: fixed-point weight digits times int8 value units), only
// called when AmxInt8Usable().
void AttendAmxTq3Int8Values(const KernelTask& task);
// True when the CPU has AMX-TILE, AMX-BF16 and the AVX-512 subset the AMX kernels use, and the OS granted this
// process tile state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool AmxUsable();
// AmxUsable() and AMX-INT8.
bool AmxInt8Usable();
// The bf16 table the AMX kernels hold TQ3 codes as (8 entries, index = sign << 2 | magnitude): the signed
// units, Tq3Centroid(i) * kTq3UnitsPerMagnitude; 1/alpha goes into each vector's scale. For the exactness test.
void Tq3AmxCentroidUnits(uint16_t* units_bf16);
// The int8 units the AMX-INT8 TQ3 kernels put into their tiles, back in coordinate order, for the expansion tests
// (only when AmxInt8Usable()). Keys: one key of Tq3CodeBytes(head_dim) code bytes, units[coordinate] from its
// score A-tile row. Values: keys 0 .. n - 1 (n <= 4) at value_bytes apart, units[k * head_dim + coordinate] from
// their value B-tile rows (one key quad).
void Tq3AmxInt8KeyUnits(const uint8_t* codes, int head_dim, int8_t* units);
void Tq3AmxInt8ValueUnits(const uint8_t* values, size_t value_bytes, int n, int head_dim, int8_t* units);

// The bf16 words the AMX FP8 kernel expands E4M3 codes to, back in coordinate order, for the expansion test (only
// when AmxUsable()). Keys: one key of head_dim codes, bf16[coordinate] from its score A-tile row. Values: keys 0 and
// 1 (n <= 2; a key at or past n reads as code 0) at head_dim bytes apart, bf16[k * head_dim + coordinate] from
// their value B-tile rows (VNNI pairs).
void Fp8AmxKeyBf16(const uint8_t* codes, int head_dim, uint16_t* bf16);
void Fp8AmxValueBf16(const uint8_t* values, int n, int head_dim, uint16_t* bf16);

// The query and output rotations of the AVX-512 and AMX TQ3 kernels (kernels/cpu/hadamard_avx512.cpp): the bits of
// HadamardRotation::Forward / Inverse (same fp32 operations per element, pairs of a pass 16 at a time). Only
// called when the CPU has AVX-512F. x and y may alias.
void HadamardForwardAvx512(const HadamardRotation& rotation, const float* x, float* y);
void HadamardInverseAvx512(const HadamardRotation& rotation, const float* y, float* x);
// The query digit tiles of the AMX-INT8 TQ3 kernels (AttendAmxTq3Int8*) for `rows` rows (1..kMaxTaskRows) of
// q[rows][head_dim] and one score scale, as the kernels write them: tiles gets the head_dim / 64 chunks of the
// task workspace's q_digits (Tq3AmxQueryDigitBytes(rows, head_dim) bytes, unused columns zero), digit_scales[r]
// the fixed-point unit of row r. reference: the scalar code (the kernels' fallback for non-finite queries)
// instead of the vector one. For the bit-identity test; only when AmxInt8Usable().
size_t Tq3AmxQueryDigitBytes(int rows, int head_dim);
void Tq3AmxQueryDigits(const float* q, int rows, float score_scale, int head_dim, bool reference, int8_t* tiles,
                       float* digit_scales);

// Kernel families, in increasing order of capability.
enum class CpuIsa { kScalar, kAvx512, kAmx };

// The one place that decides which kernel runs (kernels/cpu/cpu_dispatch.cpp): for a task of `rows` query rows
// (1..kMaxTaskRows; a decode task's rows are the GQA group) over a view of `format` and `head_dim`. Never a
// family whose MaxTaskRowsOf is below `rows` (the scalar kernels take any count). tq3_scores: the TQ3 score variant
// asked for (kAuto runs every TQ3 task on AMX where its scores are int8: UseTq3Int8Scores).
CpuIsa SelectIsa(CpuKernelFamily family, bool force_scalar, KvFormat format, int rows, int head_dim,
                 CpuTq3Scores tq3_scores = CpuTq3Scores::kAuto);
// The most rows one task of family `isa` accepts.
int MaxTaskRowsOf(CpuIsa isa);
// Query rows per task for a view of `format` and `head_dim` with `group` query heads per KV head, at most
// `max_task_rows` (CpuAttentionOptions::max_task_rows, 1..kMaxTaskRows): whole groups of consecutive tokens
// while they fit, else pieces of one group. Groups of up to kNarrowTaskRows keep tasks of at most that many rows;
// a larger group becomes one task (pieces of 16 above 16) when the family SelectIsa picks for that many rows
// accepts them, else pieces of kNarrowTaskRows. Every task then runs SelectIsa(rows of that task).
int TaskRowsFor(CpuKernelFamily family, bool force_scalar, KvFormat format, int group, int head_dim,
                int max_task_rows, CpuTq3Scores tq3_scores = CpuTq3Scores::kAuto);
// The family that runs when `wanted` is asked for explicitly: wanted, or the next one down the machine has.
CpuIsa UsableIsa(CpuIsa wanted);
KernelFn KernelFor(CpuIsa isa);
// Whether an AMX TQ3 task of `rows` rows scores on AMX-INT8 (AttendAmxTq3Int8) when `wanted` is asked for; false
// for other formats and on machines without AMX-INT8.
bool UseTq3Int8Scores(CpuTq3Scores wanted, KvFormat format, int rows, int head_dim);
// Whether such a task (UseTq3Int8Scores true) also runs its value products on AMX-INT8 (AttendAmxTq3Int8Values)
// when `wanted` is asked for; false wherever UseTq3Int8Scores is.
bool UseTq3Int8Values(CpuTq3Values wanted, CpuTq3Scores scores, KvFormat format, int rows, int head_dim);
// The kernel a task of `rows` rows over a view of `format` and `head_dim` runs: SelectIsa's family, and for AMX
// TQ3 the score and value variants UseTq3Int8Scores and UseTq3Int8Values name.
KernelFn SelectKernel(const CpuAttentionOptions& options, KvFormat format, int rows, int head_dim);
const char* IsaName(CpuIsa isa);

// Writes the empty state (lse -inf, zero output) to every row.
void WriteEmptyState(const KernelTask& task, int head_dim);

}  // namespace minimakv::cpu
