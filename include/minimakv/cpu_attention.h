// CPU attention over paged KV: one direct kernel per storage format, each writing partial softmax states
// (partial_state.h, base-2 LSE), and a merge that combines the formats' states into attention over all tokens.
//
// Every kernel reads the pages in place: BF16 and FP8 codes are widened a register at a time, TQ3 is scored in
// the rotated domain (query rotated once per head, score = scale_k * sum_i q'_i c[idx_i], values accumulated
// rotated, one inverse rotation per (query token, head) at the end). Nothing is dequantized to a cache-sized
// buffer. Each key and value is unpacked once per KV head and shared by the query heads of its GQA group: up to
// 16 query rows per task on AMX (and the scalar reference), 8 on AVX-512 (larger groups: pieces of 8).
//
// Work is split over (sequence, KV head, block of up to 16 query rows) and, when that gives too few items for the
// threads, over page ranges of a sequence whose partial states are merged afterwards.
#pragma once

#include <span>

#include "minimakv/attention_batch.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/kv_format.h"
#include "minimakv/paged_kv_view.h"
#include "minimakv/status.h"

namespace minimakv {

// CPU kernel families. A family the CPU (or, for AMX, the OS) lacks falls back to the next one down:
// amx -> avx512 -> scalar. The choice is made in one place, kernels/cpu/cpu_dispatch.cpp.
enum class CpuKernelFamily : uint8_t {
  kAuto,    // per (format, query heads per KV head, head_dim), the family measured fastest on this project's
            // AMX machine (table in kernels/cpu/cpu_dispatch.cpp); the environment variable MINIMAKV_CPU_ISA
            // (auto | amx | avx512 | scalar) replaces kAuto for a whole process
  kAmx,     // AMX (with GFNI for the TQ3 code expansion) for every format
  kAvx512,  // AVX-512 for every format
  kScalar,  // the portable scalar kernels (the reference)
};

// How the AMX TQ3 kernel computes its scores (its value pass: CpuTq3Values, int8 only with int8 scores). The
// choice is made in one place, kernels/cpu/cpu_dispatch.cpp; a machine without AMX-INT8 runs kBf16.
enum class CpuTq3Scores : uint8_t {
  kAuto,  // what measured faster per (task rows, head_dim) (cpu_dispatch.cpp; docs/cpu-notes.md)
  kBf16,  // key units as bf16 tiles, the query split into three bf16 parts (TDPBF16PS, 32 coordinates each)
  kInt8,  // key units as int8 tiles, the query a 24-bit fixed point in three int8 digits (TDPBSSD, 64 each)
};

// How the AMX TQ3 kernel with int8 scores computes its value products (session 9, docs/BENCHMARKS.md section 3).
// The choice is made in one place, kernels/cpu/cpu_dispatch.cpp; only where the TQ3 scores run on AMX-INT8.
enum class CpuTq3Values : uint8_t {
  kAuto,  // int8 wherever the scores are int8, as measured faster (cpu_dispatch.cpp); the environment variable
          // MINIMAKV_TQ3_VALUES (bf16 | int8)
          // replaces kAuto for a whole process, for A/B runs of whole programs
  kBf16,  // value units as bf16 tiles in VNNI pairs, the softmax weights split into three bf16 parts (TDPBF16PS)
  kInt8,  // value units as int8 tiles in VNNI quads, the weights a 24-bit fixed point per row and block of 64
          // keys in three unsigned digits (TDPBUSD, 64 keys per product)
};

class ThreadPool;  // minimakv/thread_pool.h

struct CpuAttentionOptions {
  int num_threads = 1;        // worker threads for this call (the calling thread is one of them)
  // Persistent workers: when set, the call runs on pool->num_threads() threads (num_threads is ignored) instead
  // of starting num_threads - 1 threads per call (~37 us each with AMX state, docs/cpu-notes.md).
  // Not from inside a task of the same pool (its loops do not nest).
  ThreadPool* pool = nullptr;
  bool force_scalar = false;  // run the portable scalar kernels even where SIMD ones exist (= kScalar)
  CpuKernelFamily family = CpuKernelFamily::kAuto;
  // At most this many query rows (query token x query head of one GQA group) per kernel task, 1..16: each
  // unpacked key and value is shared by a task's rows. 16 lets a GQA group of 9-16 heads (Qwen3-235B-A22B,
  // Llama-3.1-405B: 16; GLM-4.5: 12) run as one AMX task; 8 is the limit before that (groups above 8 cut into
  // tasks of 8, each unpacking the keys again), kept for A/B runs (`minimakv bench --isa auto:8,auto`). The
  // AVX-512 kernels take at most 8 whatever this says (kernels/cpu/cpu_dispatch.cpp, TaskRowsFor).
  int max_task_rows = 16;
  // TQ3 scores on AMX: bf16 or int8 tiles (only where the TQ3 tasks run on AMX).
  CpuTq3Scores tq3_scores = CpuTq3Scores::kAuto;
  // TQ3 values on AMX: bf16 or int8 tiles (only where the TQ3 scores run on AMX-INT8).
  CpuTq3Values tq3_values = CpuTq3Values::kAuto;
};

// Name of the kernel family that runs for `format` on this machine with these options, for decode with `group`
// query heads per KV head and `head_dim` (the family of the first task of a group, whose rows are the group or
// the piece of it the planner gives one task): "amx", "avx512" or "scalar".
const char* CpuKernelIsaFor(const CpuAttentionOptions& options, KvFormat format, int group, int head_dim);
// The same at the Llama-3-8B decode shape (group 4, head_dim 128).
inline constexpr int kLlamaDecodeGroup = 4;
inline constexpr int kLlamaHeadDim = 128;
const char* CpuKernelIsaFor(const CpuAttentionOptions& options, KvFormat format);
// The same over all formats at the Llama-3-8B decode shape: one name when every format runs the same family,
// else "amx+avx512" (kAuto on an AMX machine).
const char* CpuKernelIsa(const CpuAttentionOptions& options);

// Which AMX score variant the TQ3 tasks of a decode with `group` query heads per KV head run: "int8" or "bf16",
// or "" when those tasks do not run on AMX.
const char* CpuTq3ScoresFor(const CpuAttentionOptions& options, int group, int head_dim);
// Which value variant those TQ3 tasks run: "int8" or "bf16", or "" when they do not run on AMX.
const char* CpuTq3ValuesFor(const CpuAttentionOptions& options, int group, int head_dim);

// Partial states of every query token of every sequence over the tokens of ONE format's view.
//   view      pages of one format; view.num_seqs must equal queries.num_seqs
//   queries   q [total_q][num_q_heads][head_dim], original domain; num_q_heads a multiple of view.layout.kv_heads
//   rotation  required for TQ3 (head_dim must match), ignored otherwise
//   out       out [total_q][num_q_heads][head_dim], lse_log2 [total_q][num_q_heads]
// A sequence with no tokens in the view gets the empty state (lse_log2 = -inf, out = 0).
// REQUIRES: view page ids lie inside the pool view.pages points to.
Status ComputePartialStatesCpu(const PagedKvView& view, const AttentionQueries& queries,
                               const HadamardRotation* rotation, const PartialStatesOut& out,
                               const CpuAttentionOptions& options);

// Merges `count` partial-state sets elementwise into the first: for every (query token, head) row r,
// out[0] row r <- out[0] (+) out[1] (+) ... (MergePartialState, left to right).
//   outs[i]     [rows][head_dim]      lse_log2s[i]  [rows]
Status MergePartialStatesCpu(std::span<float* const> outs, std::span<float* const> lse_log2s, int64_t rows,
                             int head_dim);

// Attention over the union of several views (typically one per format) of the same sequences: runs each
// view's kernel and merges the states.
//   out       [total_q][num_q_heads][head_dim]   attention output over all tokens of all views
//   lse_log2  [total_q][num_q_heads] or null
// Views may be empty (no pages); all must share num_seqs, kv_heads and head_dim.
Status AttendMixedCpu(std::span<const PagedKvView> views, const AttentionQueries& queries,
                      const HadamardRotation* rotation, float* out, float* lse_log2,
                      const CpuAttentionOptions& options);

}  // namespace minimakv
