// Paged decode attention on the GPU: plan, per-format partial kernels, merge. See cuda_attention.h.
//
// Partial kernel (one CTA = 4 warps = one work item x up to 8 query heads of one KV head, v17: up to 16 as two MMA
// head tiles sharing the K / V loads, for BF16 and for FP8 / TQ3 at head_dim <= 128; v23: TQ3 at head_dim 128 also
// as one 16-warp CTA per SM, the plan's choice, CudaTq3Ctas; v27: TQ3 at head_dim 128 with groups of 4 as the head_dim-256
// kernel over two adjacent KV heads, kPairedKv; v28: head_dim 64 likewise through the head_dim-128 kernel; session
// 15: groups of 1-3 too, in gapped rows). BF16
// (DecodePartialKernel) takes key tiles of 16 tokens and runs two tensor-core products per tile (mma.sync
// m16n8k16, fp32 accumulate):
//   S[16 heads][8 keys]  = Q[16 heads][16 dims] * K^T       (two 8-key n-tiles; heads >= group are zero rows)
//   O^T[16 dims][8 heads] += V^T[16 dims][16 keys] * P^T    (P^T fragments are the S accumulators, no shuffle)
// FP8 and TQ3 (DecodePartialTransposedKernel) score S^T = K Q^T (keys as the MMA rows), so P^T for the value MMA
// comes out of the score accumulators by one movmatrix per 8 keys; TQ3 takes 32-key units and scores them on the
// integer tensor cores (mma m16n8k32 s8: the key's signed unit as one int8 digit, the query as three).
// The reduction dimension of an MMA may be permuted freely as long as both operands use the same permutation,
// so each thread loads 16-byte runs of its key rows straight into fragment registers (K side: the query
// fragment follows the key layout; V side: the output rows are relabeled). TQ3 codes expand in registers: the
// code words hold 3-bit indices as nibbles (tq3_codec.h), which serve as byte-permute (prmt) selectors after a
// mask: one prmt per 4 coordinates and int8 digit (scores), one prmt of biased unit bytes plus two that place them
// into fp16 integers and one fp16 subtraction per fp16x2 (values). Nothing is dequantized to memory.
#include "minimakv/cuda_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_warp_rotation.cuh"
#include "minimakv/cuda_cache_ops.h"
#include "minimakv/partial_state.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {
namespace {

using cuda_detail::kFullWarpMask;
using cuda_detail::kWarpSize;

constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * kWarpSize;
constexpr int kMaxGroup = 8;            // query heads per CTA (head tile) that fit the MMA's 8-wide head dimension
constexpr int kMaxKvHeads = 1024;       // KV heads the plan takes (products of the launches stay far inside int)
constexpr int kMaxQueryGroup = 64;      // query heads per KV head the plan takes (several CTAs per KV head)
constexpr int kBlockDims = 128;         // K side: dims handled per block of 8 k-steps (each thread: 32 of them)
// v16: head_dim 64 has one K block of 64 dims (4 k-steps of 16); 128 / 256 keep kBlockDims (their code is unchanged).
template <int kHeadDim>
__host__ __device__ constexpr int KBlockDims() {
  return kHeadDim < kBlockDims ? kHeadDim : kBlockDims;
}
constexpr int kMinChunkTokens = 128;    // smallest page chunk a CTA takes (keeps the merge small)
constexpr int kCtaOverheadTokens = 128; // split cost model: a CTA's fixed work (query fragments, combine) in tokens
constexpr int kMergeWarps = 4;
constexpr size_t kWorkspaceAlign = 256;
// TQ3 centroids enter the MMAs as their integer units (tq3_codec.h: magnitudes = units / alpha): int8 on the key
// side, fp16 on the value side (both exact); 1 / alpha goes into the scales.
// (Scalars: device code may read namespace-scope constexpr scalars, not arrays.)
constexpr float kTq3Unit0 = kTq3MagnitudeUnits[0];
constexpr float kTq3Unit1 = kTq3MagnitudeUnits[1];
constexpr float kTq3Unit2 = kTq3MagnitudeUnits[2];
constexpr float kTq3Unit3 = kTq3MagnitudeUnits[3];
constexpr float kTq3InvUnitsPerMagnitude = 1.0f / kTq3UnitsPerMagnitude;
// fp16 probabilities are scaled by 2^14 (folded into v_unit) so that p * scale / max_scale stays in the normal
// fp16 range instead of underflowing to subnormals.
constexpr float kProbScale = 16384.0f;
// Build switches (session 5 cleanup: docs/cuda-notes.md "Build switches" lists these and the removed ones, whose
// code lives at d36dc96). Each default is the measured best; a build may override them (bench/cuda/kernel_variants.sh).
// Kept only where both settings win somewhere, or as a cheap A/B or test lever (reason on each):
// - MINIMAKV_TQ3_CTAS_D256 / _D128: TQ3 CTAs per SM for __launch_bounds__ (shared memory may allow fewer: the d = 256
//   pair stages fit 2). Occupancy lever, a number only (v8: 3 at d = 256, 4 at d = 128).
#ifndef MINIMAKV_TQ3_CTAS_D256
#define MINIMAKV_TQ3_CTAS_D256 3
#endif
#ifndef MINIMAKV_TQ3_CTAS_D128
#define MINIMAKV_TQ3_CTAS_D128 4
#endif
// - MINIMAKV_TQ3_PAIR_STAGES_D128 / _D256: stages of 32 keys per warp (3: one unit in flight while the warp computes
//   the next and the values of the previous one). Stage-depth lever, a number only (v12: 4 at d = 128 was +0.6%).
#ifndef MINIMAKV_TQ3_PAIR_STAGES_D128
#define MINIMAKV_TQ3_PAIR_STAGES_D128 3
#endif
#ifndef MINIMAKV_TQ3_PAIR_STAGES_D256
#define MINIMAKV_TQ3_PAIR_STAGES_D256 3
#endif
// - MINIMAKV_CUDA_PDL: programmatic dependent launches inside a decode step (LaunchKernel, AllowDependentLaunch;
//   v8: 2-10% faster). 0 = plain stream order: a one-line lever to rule kernel overlap out when chasing a bug.
#ifndef MINIMAKV_CUDA_PDL
#define MINIMAKV_CUDA_PDL 1
#endif
// - MINIMAKV_MERGE_ROW_WARPS_FEW / _MANY: warps per row of MergeRowKernel, 8 when there are few rows (batch 1: ~100
//   items per row, two rounds of loads per warp), else 4 (v10: at Qwen 64K the merge alone 9.6 / 12.3 us at batch 1,
//   8.5 / 7.9 us at batch 8). Test lever: a build with 1 / 1 runs the multi-round path on the GPU tests' sequences.
#ifndef MINIMAKV_MERGE_ROW_WARPS_FEW
#define MINIMAKV_MERGE_ROW_WARPS_FEW 8
#endif
#ifndef MINIMAKV_MERGE_ROW_WARPS_MANY
#define MINIMAKV_MERGE_ROW_WARPS_MANY 4
#endif
// - MINIMAKV_TWO_HEAD_TILES (v17): 1 = CTAs take up to 16 query heads (two MMA head tiles sharing one K / V read and
//   expansion; FP8 / TQ3 at d = 64 / 128, BF16 see below); 0 = tiles of 8 heads as in v16 (each CTA reads the pages
//   again). A / B lever.
// - MINIMAKV_TQ3_TWO_TILE_CTAS_D128 / _D64, MINIMAKV_FP8_TWO_TILE_CTAS (v17): CTAs per SM of the two-tile kernel for
//   __launch_bounds__. Occupancy levers, numbers only (registers without spills: docs/cuda-notes.md v17; TQ3 d = 128 at
//   3 CTAs, 168 registers, spills 76 bytes in the loop, hence 2).
#ifndef MINIMAKV_TWO_HEAD_TILES
#define MINIMAKV_TWO_HEAD_TILES 1
#endif
#ifndef MINIMAKV_TQ3_TWO_TILE_CTAS_D128
#define MINIMAKV_TQ3_TWO_TILE_CTAS_D128 2
#endif
#ifndef MINIMAKV_TQ3_TWO_TILE_CTAS_D64
#define MINIMAKV_TQ3_TWO_TILE_CTAS_D64 3
#endif
#ifndef MINIMAKV_FP8_TWO_TILE_CTAS
#define MINIMAKV_FP8_TWO_TILE_CTAS 3
#endif
// - MINIMAKV_BF16_TWO_HEAD_TILES (v17): 1 = BF16 CTAs take up to 16 query heads too (all head_dims: shared memory
//   holds BF16 at 1-2 CTAs per SM at d >= 128 anyway), 0 = tiles of 8. A / B lever.
#ifndef MINIMAKV_BF16_TWO_HEAD_TILES
#define MINIMAKV_BF16_TWO_HEAD_TILES 1
#endif
#ifndef MINIMAKV_BF16_TWO_TILE_CTAS
#define MINIMAKV_BF16_TWO_TILE_CTAS 4
#endif
// - MINIMAKV_FP8_LAZY_MAX (v18): 1 = the FP8 kernels at d = 64 and with two head tiles take TQ3's lazy softmax step
//   (kLazyMax: no shuffle max while a unit's scores stay within kLazyMaxMargin of the running max); 0 = the full
//   update every tile as before. A / B lever (docs/cuda-notes.md v18).
#ifndef MINIMAKV_FP8_LAZY_MAX
#define MINIMAKV_FP8_LAZY_MAX 1
#endif
// - MINIMAKV_CUDA_TIMELINE (v19): 1 = per-CTA %globaltimer probes in the partial and merge kernels (CudaCtaTimes,
//   cuda_attention.h) for the fixed-cost breakdown of a step (bench: minimakv_cuda_bench --timeline N); 0 = no probe
//   (the default: the kernels' PTX is unchanged). Diagnostic only: thread 0 of each CTA stores five words.
#ifndef MINIMAKV_CUDA_TIMELINE
#define MINIMAKV_CUDA_TIMELINE 0
#endif
// (v19 dynamic work items and v20 row claims were measured slower and removed in session 8; docs/cuda-notes.md v19 /
// v20 have the figures, commits a34e05b and dbdb294-c113b56 the code.)
// - MINIMAKV_MERGE_EARLY_INDEX (v19; MergeKernel too since session 14): 1 = the merge kernels read their row's item
//   lists (indptr: the plan's upload, not written by this step's kernels) before their PDL wait, so the wait's release
//   starts with the partial states' loads (one dependent round trip less after the last partial CTA); 0 = everything
//   after the wait (v10-v18). Default 1: same-run A/B over 8 points x 4 formats (5 rounds): no cell slower beyond
//   0.05%, batch 1 0.5-3.4% faster (v19, MergeRowKernel).
#ifndef MINIMAKV_MERGE_EARLY_INDEX
#define MINIMAKV_MERGE_EARLY_INDEX 1
#endif
// - MINIMAKV_LATE_TRIGGER (v19): 1 = a partial-kernel CTA lets the step's next kernel launch (griddepcontrol.
//   launch_dependents) after its key loop instead of at its top, so the next kernel's CTAs (the merge's, waiting in
//   griddepcontrol.wait; in the mix the FP8 kernel's) are not resident beside the partial CTAs for the whole loop.
//   v19's timeline: merge CTAs start ~2 us into the step on the SMs with free slots, and the partial CTAs' key loops
//   there run up to 1.5x longer (TQ3, issue-bound); 0 = trigger at the top (v8-v18). 2 (session 8, lead) = after the
//   key loop only in the step's last partial kernel (the one the merge follows; DecodeParams::trigger_after_loop, set
//   by CudaDecodeRun), at the top in the others, so in the mix the FP8 kernel still overlaps the TQ3 kernel (v19: with
//   1 the Llama mix was 1-5% slower, TQ3-only steps on Qwen 4-10% faster).
//   Default 2: same-run A/B (session 8, 06:57 UTC, 8 points x 4 formats, 5 rounds) no cell slower beyond 0.1%,
//   Qwen TQ3 2.5-12.5% faster, Qwen 8K b1 mix 32.0 -> 23.9 us, FP8 1.3-3.2%, BF16 0.3-1.4% (docs/cuda-notes.md v21).
#ifndef MINIMAKV_LATE_TRIGGER
#define MINIMAKV_LATE_TRIGGER 2
#endif
constexpr bool kLazyFp8 = MINIMAKV_FP8_LAZY_MAX != 0;
constexpr bool kBf16TwoHeadTiles = MINIMAKV_BF16_TWO_HEAD_TILES != 0;
constexpr int kBf16TwoTileCtas = MINIMAKV_BF16_TWO_TILE_CTAS;
constexpr bool kTwoHeadTiles = MINIMAKV_TWO_HEAD_TILES != 0;
constexpr int kTq3TwoTileCtasD128 = MINIMAKV_TQ3_TWO_TILE_CTAS_D128;
constexpr int kTq3TwoTileCtasD64 = MINIMAKV_TQ3_TWO_TILE_CTAS_D64;
constexpr int kFp8TwoTileCtas = MINIMAKV_FP8_TWO_TILE_CTAS;
constexpr int kTq3CtasD256 = MINIMAKV_TQ3_CTAS_D256;
constexpr int kTq3CtasD128 = MINIMAKV_TQ3_CTAS_D128;
constexpr int kTq3PairStagesD128 = MINIMAKV_TQ3_PAIR_STAGES_D128;
constexpr int kTq3PairStagesD256 = MINIMAKV_TQ3_PAIR_STAGES_D256;
constexpr bool kProgrammaticLaunch = MINIMAKV_CUDA_PDL != 0;
constexpr bool kMergeEarlyIndex = MINIMAKV_MERGE_EARLY_INDEX != 0;
constexpr int kMergeRowWarpsFewRows = MINIMAKV_MERGE_ROW_WARPS_FEW;
constexpr int kMergeRowWarpsManyRows = MINIMAKV_MERGE_ROW_WARPS_MANY;
constexpr int kMergeFewRows = 128;
constexpr int kMergeOneWarpItems = 8;  // up to this many items per sequence (all views) the v9 merge runs
// TQ3 design choices without a switch any more (the losing alternatives are at d36dc96): 32-key units (v11: two
// 16-key MMA row blocks per copy, softmax step and loop iteration, 3.5-5.8% faster than 16-key tiles); d = 256 pairs
// need ~210 registers and 75 KB of stages per CTA: 2 CTAs per SM (v10: 3). The transposed kernel's combine area has
// padded rows (v12: one word per 32 dims, row stride = kHeadDim / 64 mod 16 words, so the 32 lanes' output stores of
// one m-tile fall in 32 banks; v11 had 32-way conflicts, ~3% of the stall samples at Qwen 64K b8).
// Combine area of the transposed kernel: [warp][head] rows of kCombineRow words, dim d at d + d / 32 (padded).
template <int kHeadDim>
__host__ __device__ constexpr int CombineRowWords() {
  int row = kHeadDim + kHeadDim / 32;  // one pad word per 32 dims: a thread's 32-dim group g lands g banks apart
  while (row % 16 != (kHeadDim / 64) % 16) ++row;  // heads 2t: 2t * row = 8t (d 256) / 4t (d 128) banks apart
  return row;
}
template <int kHeadDim>
__host__ __device__ constexpr int CombineIndex(int head, int dim) {
  return head * CombineRowWords<kHeadDim>() + dim + dim / 32;
}
constexpr float kLazyMaxMargin = 1.0f;  // log2 units: probabilities up to 2 (fp16 P^T up to 2^15, see the kernel)

Status CudaError(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(error));
}

size_t AlignUp(size_t bytes) { return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }


// ---------------------------------------------------------------------------------------------------------
// Device helpers

__device__ inline void MmaF16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                              uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ inline void MmaBf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <KvFormat kFormat>
__device__ inline void Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                           uint32_t b1) {
  if constexpr (kFormat == KvFormat::kBf16) {
    MmaBf16(c, a0, a1, a2, a3, b0, b1);
  } else {
    MmaF16(c, a0, a1, a2, a3, b0, b1);
  }
}

// Two 16-bit operands (low half = first) in the MMA element type of the format: bf16 for BF16 pages, fp16 else.
template <KvFormat kFormat>
__device__ inline uint16_t ToOperand(float x) {
  if constexpr (kFormat == KvFormat::kBf16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}
template <KvFormat kFormat>
__device__ inline float FromOperand(uint16_t bits) {
  if constexpr (kFormat == KvFormat::kBf16) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  } else {
    return __half2float(__ushort_as_half(bits));
  }
}
__device__ inline uint32_t Pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }


// Four E4M3 codes -> two fp16x2 (codes 0, 1 -> lo; 2, 3 -> hi), exact (hardware conversion, sm_89+). The 16-bit halves go to the conversions as
// register halves, so no shift / mask instructions split the word first.
__device__ inline void E4m3x4ToF16x2x2(uint32_t four_codes, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n cvt.rn.f16x2.e4m3x2 %1, b;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(four_codes));
}

// Fragment reads from the staged tile (shared memory).
__device__ inline uint4 LoadU4(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ inline uint32_t LoadU32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Programmatic dependent launch (sm_90): the kernels of one decode step after the first are launched with
// programmatic stream serialization (LaunchKernel below), so the next kernel's CTAs may start while this one's
// last CTAs run. Each kernel lets its dependent start once all its CTAs run (AllowDependentLaunch at the top) and
// calls WaitForPriorGrids (the previous kernel of the stream has completed and its writes are visible) before it
// reads anything an earlier kernel of the step wrote; a partial kernel, which reads nothing of the step, waits in one
// CTA before it exits (KeepsStepOrder, v26), so that completion stays transitive along the stream. Without the launch
// attribute both are no-ops.
#if MINIMAKV_CUDA_TIMELINE
// v19 timeline probes (MINIMAKV_CUDA_TIMELINE): thread 0 of a CTA stamps %globaltimer into its record.
__device__ CudaCtaTimes g_cta_times[kCudaTimelineKernels * kCudaTimelineMaxCtas];
__device__ inline uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t)::"memory");
  return t;
}
__device__ inline CudaCtaTimes* CtaTimesRecord(int kernel) {
  const unsigned cta = blockIdx.x + gridDim.x * blockIdx.y;
  return cta < unsigned(kCudaTimelineMaxCtas) ? &g_cta_times[kernel * kCudaTimelineMaxCtas + cta] : nullptr;
}
__device__ inline void TimelineEntry(int kernel) {
  if (threadIdx.x != 0) return;
  const uint64_t now = GlobalTimerNs();
  if (CudaCtaTimes* r = CtaTimesRecord(kernel)) {
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    r->start_ns = now;
    r->first_warp_ns = ~0ull;  // atomicMin target (the warps reach it after the CTA's first barrier)
    r->sm = sm;
    r->written = 1;
  }
}
#define MINIMAKV_TIMELINE_ENTRY(kernel) TimelineEntry(kernel)
#define MINIMAKV_TIMELINE_STAMP(kernel, field)                                          \
  do {                                                                                  \
    if (threadIdx.x == 0) {                                                             \
      if (CudaCtaTimes* r_ = CtaTimesRecord(kernel)) r_->field = GlobalTimerNs();       \
    }                                                                                   \
  } while (0)
// The stamp plus the SM's cycle counter (session 12: at ready and loop end, for the loop's SM clock rate).
#define MINIMAKV_TIMELINE_STAMP_CLOCK(kernel, field, clock_field)                      \
  do {                                                                                  \
    if (threadIdx.x == 0) {                                                             \
      if (CudaCtaTimes* r_ = CtaTimesRecord(kernel)) {                                  \
        r_->clock_field = clock64();                                                    \
        r_->field = GlobalTimerNs();                                                    \
      }                                                                                 \
    }                                                                                   \
  } while (0)
#define MINIMAKV_TIMELINE_WARP_DONE(kernel)                                                           \
  do {                                                                                                \
    if (threadIdx.x % kWarpSize == 0) {                                                               \
      if (CudaCtaTimes* r_ = CtaTimesRecord(kernel)) {                                                \
        atomicMin(reinterpret_cast<unsigned long long*>(&r_->first_warp_ns), GlobalTimerNs());        \
      }                                                                                               \
    }                                                                                                 \
  } while (0)
#define MINIMAKV_TIMELINE_SYNC() __syncthreads()
#else
#define MINIMAKV_TIMELINE_ENTRY(kernel) \
  do {                                  \
  } while (0)
#define MINIMAKV_TIMELINE_STAMP(kernel, field) \
  do {                                         \
  } while (0)
#define MINIMAKV_TIMELINE_STAMP_CLOCK(kernel, field, clock_field) \
  do {                                                           \
  } while (0)
#define MINIMAKV_TIMELINE_WARP_DONE(kernel) \
  do {                                      \
  } while (0)
#define MINIMAKV_TIMELINE_SYNC() \
  do {                           \
  } while (0)
#endif

__device__ inline void AllowDependentLaunch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ inline void WaitForPriorGrids() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Value tables for prmt (session 7): a code's signed unit (tq3_codec.h: integers, |unit| <= 127) plus
// kTq3ValueBias is one unsigned byte u; placed as the low byte of an fp16 whose high byte is 0x64 it reads as
// exactly 1024 + u (fp16 spacing is 1 in [1024, 2048)), so one sub.f16x2 of 1024 + bias gives the unit exactly.
// Per 4 codes: one lookup + two placing prmt + two HSUB2 on the FMA pipe, against two lookups (low / high fp16
// bytes) + two interleaves before: one integer-ALU instruction less (same-run A/B, docs/cuda-notes.md v16b).
constexpr int kTq3ValueBias = 128;
constexpr uint32_t kFp16HighByte1024 = 0x64u;  // fp16 1024.0 = 0x6400
struct Tq3Tables {
  uint32_t unit_pos;    // byte m: +unit m + bias (code m, sign bit clear)
  uint32_t unit_neg;    // byte m: -unit m + bias (code 4 + m)
  uint32_t high_bytes;  // 0x64 in every byte
  uint32_t offset;      // fp16x2 (1024 + bias, 1024 + bias)
};
__device__ inline Tq3Tables MakeTq3Tables() {
  Tq3Tables t{0, 0, kFp16HighByte1024 * 0x01010101u, 0};
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int unit = int(m == 0 ? kTq3Unit0 : m == 1 ? kTq3Unit1 : m == 2 ? kTq3Unit2 : kTq3Unit3);
    t.unit_pos |= uint32_t(unit + kTq3ValueBias) << (8 * m);
    t.unit_neg |= uint32_t(-unit + kTq3ValueBias) << (8 * m);
  }
  const uint32_t offset_bits = __half_as_ushort(__float2half_rn(1024.0f + kTq3ValueBias));
  t.offset = offset_bits | (offset_bits << 16);
  return t;
}

// ---- K side layout: per 128-dim block, thread t (= lane % 4) holds 16 pair registers of one key row.
// KDim gives the dimension (within the block) of pair register rho, element e (0 = low half).
template <KvFormat kFormat>
__host__ __device__ inline int KDim(int t, int rho, int e) {
  if constexpr (kFormat == KvFormat::kBf16) {  // uint4 i at byte 16 (4 i + t): 8 dims, pairs 4 i + w
    return 8 * (4 * (rho >> 2) + t) + 2 * (rho & 3) + e;
  } else {  // FP8: uint4 i at byte 16 (4 i + t): 16 dims, pairs 8 i + j (TQ3 queries go through digit fragments)
    static_assert(kFormat == KvFormat::kFp8, "KDim: BF16 and FP8 key layouts");
    return 16 * (4 * (rho >> 3) + t) + 2 * (rho & 7) + e;
  }
}

// kDims = the block's dims (v16: 64 at head_dim 64, then only pairs[0..7] are filled, dims KDim(t, rho < 8, e) < 64).
template <KvFormat kFormat, int kDims = kBlockDims>
__device__ inline void LoadExpandK(const uint8_t* vec, int block, int t, uint32_t (&pairs)[16]) {
  static_assert(kDims == kBlockDims || kDims == 64, "LoadExpandK: blocks of 128 or 64 dims");
  if constexpr (kFormat == KvFormat::kBf16) {
    const uint8_t* base = vec + block * kBlockDims * 2;
#pragma unroll
    for (int i = 0; i < kDims / 32; ++i) {
      const uint4 v = LoadU4(base + 16 * (4 * i + t));
      pairs[4 * i + 0] = v.x;
      pairs[4 * i + 1] = v.y;
      pairs[4 * i + 2] = v.z;
      pairs[4 * i + 3] = v.w;
    }
  } else {
    static_assert(kFormat == KvFormat::kFp8, "LoadExpandK: BF16 and FP8 keys");
    const uint8_t* base = vec + block * kBlockDims;
#pragma unroll
    for (int i = 0; i < kDims / 64; ++i) {
      const uint4 v = LoadU4(base + 16 * (4 * i + t));
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        E4m3x4ToF16x2x2(w[j], pairs[8 * i + 2 * j + 0], pairs[8 * i + 2 * j + 1]);
      }
    }
  }
}

// ---- V side layout: thread g (= lane / 4) owns kRun = d / 8 dims of each of its 4 keys; pair register rho is
// m-tile rho: rows g and g + 8 of V^T are VDim(g, rho, 0) and VDim(g, rho, 1).
template <KvFormat kFormat, int kHeadDim>
__host__ __device__ inline int VDim(int g, int rho, int e) {
  if constexpr (kFormat == KvFormat::kBf16) {  // uint4 i at byte 16 (8 i + g)
    return 8 * (8 * (rho >> 2) + g) + 2 * (rho & 3) + e;
  } else if constexpr (kFormat == KvFormat::kFp8 && kHeadDim == 64) {  // v16: 8 dims at byte 8 g (one uint2)
    return 8 * g + 2 * rho + e;
  } else if constexpr (kFormat == KvFormat::kFp8) {
    return 16 * (8 * (rho >> 3) + g) + 2 * (rho & 7) + e;
  } else if constexpr (kHeadDim == 64) {  // v16: quarter g & 3 of group g / 4; m-tile rho: coordinate 8 rho + 2 (g & 3) + e
    return 32 * (g >> 2) + 8 * rho + 2 * (g & 3) + e;
  } else if constexpr (kHeadDim == 256) {  // group g; m-tile rho = 4 r + 2 j + h: coordinate 8 r + 4 j + 2 h + e
    return 32 * g + 2 * rho + e;
  } else {  // half g & 1 of group g / 2; m-tile rho = 2 r + h: coordinate 8 r + 4 (g & 1) + 2 h + e
    return 32 * (g >> 1) + 8 * (rho >> 1) + 4 * (g & 1) + 2 * (rho & 1) + e;
  }
}

// BF16 values (DecodePartialKernel): 8 dims per uint4, uint4 i of thread g at byte 16 (8 i + g).
template <int kHeadDim>
__device__ inline void LoadBf16V(const uint8_t* vec, int g, uint32_t (&pairs)[kHeadDim / 16]) {
  constexpr int kPairs = kHeadDim / 16;
#pragma unroll
  for (int i = 0; i < kPairs / 4; ++i) {
    const uint4 v = LoadU4(vec + 16 * (8 * i + g));
    pairs[4 * i + 0] = v.x;
    pairs[4 * i + 1] = v.y;
    pairs[4 * i + 2] = v.z;
    pairs[4 * i + 3] = v.w;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Partial kernel

// Session 16: query_tokens T > 1. The partial kernels and the merge see a sequence's T x num_q_heads query rows as
// num_q_heads * T "virtual heads" whose KV head groups are T times larger, KV head major: virtual head
// kv * (group * T) + t * group + j is token t's query head kv * group + j. The caller's arrays are token major
// ([num_seqs * T][num_q_heads]), so with T > 1 CopyQueryRowsKernel puts the queries into virtual order in the
// workspace before the partial kernels, and the merge writes each row at its caller position (CallerRow; session
// 17: until then a second copy kernel after the merge did, ~3 us per step). The partial kernels of T = 1 stay as
// they were: the mapping inside them (tried first) made T = 1 steps 0.1-2.6% slower, same-run A/B on the H200
// (register allocation of the FP8 kernels moved; docs/cuda-notes.md, session 16).
struct QueryRowMap {
  int query_tokens;  // T
  int num_q_heads;   // the caller's query heads per token
  int group;         // the caller's query heads per KV head
  int rows_per_seq;  // num_q_heads * T
};
__device__ inline size_t CallerRow(const QueryRowMap& m, int seq, int virtual_head) {
  const int rows_per_kv = m.group * m.query_tokens;
  const int kv = virtual_head / rows_per_kv;
  const int within = virtual_head - kv * rows_per_kv;
  const int token = within / m.group;
  return (size_t(seq) * m.query_tokens + token) * m.num_q_heads + kv * m.group + (within - token * m.group);
}
constexpr int kCopyRowThreads = 64;
inline QueryRowMap RowMap(const CudaDecodeShape& shape) {
  return {shape.query_tokens, shape.num_q_heads, shape.num_q_heads / shape.kv_heads,
          shape.num_q_heads * shape.query_tokens};
}
// One CTA per virtual row: its head_dim query floats from caller order to virtual order. Scalar copies: the
// caller's rows need only 4-byte alignment.
__global__ void CopyQueryRowsKernel(const float* src, float* dst, QueryRowMap m, int head_dim) {
  const int virtual_row = blockIdx.x;
  const int seq = virtual_row / m.rows_per_seq;
  const size_t caller = CallerRow(m, seq, virtual_row - seq * m.rows_per_seq);
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[size_t(virtual_row) * head_dim + i] = src[caller * head_dim + i];
}

struct DecodeParams {
  const uint8_t* pages;
  const int32_t* page_ids;
  const CudaWorkItem* items;
  const float* q;          // [num_seqs][num_q_heads][head_dim], unrotated (TQ3 rotates its rows in the kernel); with
                           // query_tokens > 1 the workspace copy in virtual-head order (QueryRowMap)
  float* part_out;         // [total_items][num_q_heads][head_dim]
  float* part_lse;         // [total_items][num_q_heads]
  PageLayout layout;
  int item_offset;         // global index of this view's first item
  int num_q_heads;         // virtual heads per sequence (the caller's num_q_heads * query_tokens)
  int group;               // virtual heads per KV head (any; v16: split into head tiles of <= kMaxGroup rows)
  int head_tiles;          // CTAs per KV head: grid y = kv_head * head_tiles + tile (v17: a CTA may hold 2 MMA tiles)
  int tile_heads;          // query heads of a full CTA (the last one of a KV head may hold fewer; > 8: two MMA tiles)
  float q_scale;           // sm_scale * log2(e): scores come out in base 2
  CudaSignBits signs;      // TQ3: the rotation's signs (q' = H D q / sqrt(d))
  float inv_sqrt_dim;
#if MINIMAKV_LATE_TRIGGER == 2
  int trigger_after_loop;  // 1: the step's last partial kernel (the merge follows): trigger after the key loop
#endif
};

// The CTA of a partial kernel that keeps the step in order (v26): the grid's last. Only it waits for the previous
// kernel of the step (WaitForPriorGrids), after writing its own states and before it exits, and in the step's last
// partial kernel it lets the merge launch only after that wait. A grid completes only when all its CTAs have exited,
// so the merge (which waits for the last partial grid) still starts after every earlier partial grid has completed
// and its writes are visible, while the other CTAs write their states and leave at once. Until v25 every CTA waited
// before writing, so in a mix the FP8 CTAs kept their SM slots until the TQ3 grid ended and the remaining FP8 CTAs
// ran as a tail after it (v26 timeline, Qwen 32K b8: FP8 CTAs exiting 83.5-86.7 us, the TQ3 grid's last exit 81.8).
// The partial kernels write disjoint workspace regions, and the step's first kernel is ordered after all earlier
// stream work (not a programmatic launch), so nothing else needs the wait.
__device__ inline bool KeepsStepOrder() { return blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1; }

// Where a partial-kernel CTA lets the step's next kernel launch (MINIMAKV_LATE_TRIGGER): true = after its key loop.
__device__ inline bool TriggerAfterLoop([[maybe_unused]] const DecodeParams& p) {
#if MINIMAKV_LATE_TRIGGER == 2
  return p.trigger_after_loop != 0;
#else
  return MINIMAKV_LATE_TRIGGER != 0;
#endif
}
// The order keeper's last act, after its own partial states are written (they are disjoint from the earlier kernels'
// states, so only the exit has to wait): wait for the previous kernel of the step, then let the next one launch.
__device__ inline void KeepStepOrder(const DecodeParams& p) {
  if (!KeepsStepOrder()) return;
  WaitForPriorGrids();  // a no-op in the step's first kernel
  if (TriggerAfterLoop(p)) AllowDependentLaunch();
}
// After the key loop: the next kernel's CTAs may take this CTA's slots (MINIMAKV_LATE_TRIGGER); the order keeper
// triggers in KeepStepOrder instead, after its wait.
__device__ inline void AllowDependentLaunchAfterLoop(const DecodeParams& p) {
  if (TriggerAfterLoop(p) && !KeepsStepOrder()) AllowDependentLaunch();
}

// v16: a CTA's query heads. Grid y = kv_head * head_tiles + tile: a KV head's query group is split into head tiles of
// at most kMaxGroup rows (the MMA's 8-wide head dimension; v17: 2 kMaxGroup rows for the two-tile kernels), each a
// CTA that reads the same pages; tiles of one KV head
// are adjacent in y, so they run in the same wave and their second reads of a page mostly hit L2. first_head =
// the tile's first query head (global index), rows = its query heads (rows >= rows are zero queries);
// pair_group = the GQA group of a paired CTA (PairedHeadTile), 0 otherwise.
struct HeadTile {
  int kv_head;
  int first_head;
  int rows;
  int pair_group;
};
__device__ inline HeadTile CtaHeadTile(const DecodeParams& p) {
  const int y = int(blockIdx.y);
  const int kv_head = p.head_tiles == 1 ? y : y / p.head_tiles;  // groups <= 8: no division
  const int first_in_group = (y - kv_head * p.head_tiles) * p.tile_heads;
  return {kv_head, kv_head * p.group + first_in_group, min(p.tile_heads, p.group - first_in_group), 0};
}
// v27 (kPairedKv): grid y = a pair of adjacent KV heads 2y, 2y + 1 with groups of up to kMaxGroup / 2 query heads,
// whose query heads are adjacent too: rows 0-3 belong to head 2y's group, rows 4-7 to head 2y + 1's (kv_head = the
// first of the pair). The split at row 4 is fixed (MMA lanes t >= 2 hold rows 4-7 and read the second head's
// scales; WritePartialStates keeps the second half of their dims), so a group g < 4 (session 15) leaves rows g-3
// and 4 + g-7 empty: PairedRowIsReal / PairedRowHead.
constexpr int kPairHalfRows = kMaxGroup / 2;
__device__ inline HeadTile PairedHeadTile(const DecodeParams& p) {
  const int kv_head = 2 * int(blockIdx.y);
  return {kv_head, kv_head * p.group, kPairHalfRows + p.group, p.group};
}
// Whether CTA row `row` holds a query head, and which (offset from heads.first_head): rows in order, or for paired
// CTAs the gapped rows above.
template <bool kPairedKv>
__device__ inline bool RowIsReal(const HeadTile& heads, int row) {
  return kPairedKv ? row < kMaxGroup && row % kPairHalfRows < heads.pair_group : row < heads.rows;
}
template <bool kPairedKv>
__device__ inline int RowHead(const HeadTile& heads, int row) {
  return kPairedKv && row >= kPairHalfRows ? row - kPairHalfRows + heads.pair_group : row;
}

// ---- Per-warp staging of key tiles in shared memory (cp.async, kStages deep): a tile is four contiguous runs
// of its page (K codes, V codes, K scales, V scales of 16 tokens of one head), copied with 16-byte cp.async.cg
// while the warp computes an earlier tile, so every warp keeps several tiles of loads in flight.
// Row strides are padded so that the fragment reads are free of bank conflicts: K rows are read 64 contiguous
// bytes per row by a quarter warp (two rows: stride = 64 mod 128), V rows 32 bytes by four rows two apart
// (stride = 16 mod 64). TQ3 rows (96 / 48 bytes) are left unpadded (few, 4-byte reads).
// kHeadTiles (v17): 8-head MMA tiles per CTA (1, or 2 for the transposed kernel's one-read groups of 9-16): the query
// fragments and the combine rows double; 1 gives the v16 layout exactly.
// kPairedKv (v27, TQ3 only): the kernel of head_dim 256 run over two adjacent KV heads of head_dim 128 (PairedHeadTile):
// a staged unit holds the two heads' runs one after the other (K rows of head a, of head b, V rows likewise, then the
// four scale runs), and the 256 "virtual" coordinates of a key are head a's 128 followed by head b's, so a key's
// second 128-dim block sits one head's whole run after its first instead of 48 bytes (GroupOffset).
template <KvFormat kFormat, int kHeadDim, int kHeadTiles = 1, bool kWideCta = false, bool kPairedKv = false>
struct TileLayout {
  static_assert(!kPairedKv || (kFormat == KvFormat::kTq3 && (kHeadDim == 256 || kHeadDim == 128) && kHeadTiles == 1 &&
                                !kWideCta),
                "paired KV heads: the narrow TQ3 kernel of head_dim 256 (128) over pages of head_dim 128 (64)");
  static constexpr int kTile = kCudaKeyTileTokens;
  // 16-key row blocks per staged tile (TQ3 pairs, v11: 2, rows of block h at h * kTile; other formats 1).
  static constexpr int kSubTiles = kFormat != KvFormat::kTq3 ? 1 : 2;
  static constexpr int kCodeBytes = int(CodeBytesPerVector(kFormat, kHeadDim));
  static constexpr int kPagedHeads = kPairedKv ? 2 : 1;           // KV heads whose runs a unit stages
  static constexpr int kPageCodeBytes = kCodeBytes / kPagedHeads;  // code bytes of one page vector
  static constexpr int kScaleBytes = int(ScaleBytesPerVector(kFormat));
  static constexpr bool kPadded = kFormat != KvFormat::kTq3;
  static constexpr int kKStride = kPageCodeBytes + (kPadded ? 64 : 0);
  static constexpr int kVStride = kPageCodeBytes + (kPadded ? 16 : 0);
  static constexpr int kHeadRunBytes = kSubTiles * kTile * kKStride;  // one head's K (or V) rows of a unit
  // Where a key's 32-coordinate group G (0 .. kHeadDim / 32 - 1, 12 code bytes) starts in its staged K or V rows:
  // G x 12 in one head's vector; paired (session 14 also at head_dim 128 over pages of 64), the first half of the
  // groups in head a's row, the second half one head run further in head b's.
  __host__ __device__ static constexpr int GroupOffset(int group) {
    constexpr int kGroupsPerPagedHead = kHeadDim / 32 / kPagedHeads;
    return kPairedKv ? (group / kGroupsPerPagedHead) * kHeadRunBytes + 12 * (group % kGroupsPerPagedHead) : 12 * group;
  }
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kPagedHeads * kHeadRunBytes;
  static constexpr int kKScaleOffset = kVOffset + kPagedHeads * kSubTiles * kTile * kVStride;
  // Room for 16 fp32 (FP8) or 32 fp16 (TQ3 pairs) scales per run and head.
  static constexpr int kHeadScaleRun = kSubTiles * kTile * kScaleBytes > 64 ? kSubTiles * kTile * kScaleBytes : 64;
  static constexpr int kScaleRun = kPagedHeads * kHeadScaleRun;
  static constexpr int kVScaleOffset = kKScaleOffset + kScaleRun;
  static_assert(kSubTiles * kTile * kScaleBytes <= kHeadScaleRun, "one tile's scales fit their run");
  static constexpr int kStageBytes = kVScaleOffset + kScaleRun;
  // Stages per warp: each SM should keep ~50-100 KB of loads in flight.
  // BF16 / FP8: 2 stages (one 5-18 KB tile ahead per warp). TQ3 pair tiles are small and compute heavy:
  // kTq3PairStagesD* (the pipelined TQ3 kernel keeps kStages - 2 of them in flight while it computes).
  static constexpr int kStages = kFormat != KvFormat::kTq3 ? 2
                                 : kHeadDim == 256        ? kTq3PairStagesD256
                                                          : kTq3PairStagesD128;
  static constexpr int kWarpStagesBytes = kStages * kStageBytes;
  static constexpr int kQFragBytes = kHeadTiles * (kHeadDim / 16) * kWarpSize * 16;
  // Shared memory: the query fragments, then per warp its stages, reused as its combine rows after the loop.
  static constexpr int kWarpCombineBytes = kMaxGroup * kHeadTiles * (CombineRowWords<kHeadDim>() + 2) * 4;
  static constexpr int kPerWarpBytes = kWarpStagesBytes > kWarpCombineBytes ? kWarpStagesBytes : kWarpCombineBytes;
  // CTAs per SM for __launch_bounds__: what shared memory allows (220 KB usable), at most 2 for d = 256 (its
  // 64 output accumulators need the registers; kTq3CtasD256 for TQ3, whose staged tiles are small) and 4 for
  // d = 128 (kTq3CtasD128 for TQ3).
  static constexpr int kSmemCtas = (220 * 1024) / (kQFragBytes + kDecodeWarps * kPerWarpBytes);
  // (v7 ran TQ3 d = 128 at 6 CTAs with 80 registers; the pipelined v8 kernel needs ~115, so 4.)
  // v17: two head tiles double the output accumulators (and the score / softmax state): k*TwoTileCtas*.
  static constexpr int kCtaCap =
      kHeadTiles == 2 ? (kFormat == KvFormat::kBf16  ? kBf16TwoTileCtas
                         : kFormat == KvFormat::kFp8 ? kFp8TwoTileCtas
                         : kHeadDim == 128           ? kTq3TwoTileCtasD128
                                                     : kTq3TwoTileCtasD64)
      : kHeadDim == 256 ? (kFormat == KvFormat::kTq3 ? kTq3CtasD256 : 2)
                        : (kFormat == KvFormat::kTq3 ? kTq3CtasD128 : 4);
  static constexpr int kNarrowCtasPerSm = kSmemCtas < 1 ? 1 : kSmemCtas > kCtaCap ? kCtaCap : kSmemCtas;
  // v23, kWideCta (HasWideTq3, CudaTq3Ctas): one TQ3 CTA per SM with the warps of kNarrowCtasPerSm narrow ones
  // (same registers per thread and shared memory per warp, one set of query fragments instead of several).
  static_assert(!kWideCta || (kFormat == KvFormat::kTq3 && kHeadTiles == 1), "wide CTAs: TQ3, one head tile");
  static constexpr int kWarps = kWideCta ? kDecodeWarps * kNarrowCtasPerSm : kDecodeWarps;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kCtasPerSm = kWideCta ? 1 : kNarrowCtasPerSm;
  static constexpr int kSmemBytes = kQFragBytes + kWarps * kPerWarpBytes;
  static_assert(kThreads <= 1024, "a CTA holds at most 1024 threads");
};

__device__ inline void CpAsync16(void* smem_dst, const void* global_src) {
  const uint32_t dst = uint32_t(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src));
}
__device__ inline void CpAsync16(uint32_t smem_dst, const void* global_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_dst), "l"(global_src));
}
// The same with constant byte offsets on both addresses (immediates of the instruction, no address arithmetic).
template <int kDstOffset, int kSrcOffset>
__device__ inline void CpAsync16Imm(uint32_t smem_dst, const void* global_src) {
  asm volatile("cp.async.cg.shared.global [%0 + %2], [%1 + %3], 16;\n" ::"r"(smem_dst), "l"(global_src),
               "n"(kDstOffset), "n"(kSrcOffset));
}
// The copy only where pred holds, as one predicated instruction (no divergent branch around it; v12).
__device__ inline void CpAsync16If(bool pred, uint32_t smem_dst, const void* global_src) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.cg.shared.global [%0], [%1], 16;\n}\n" ::"r"(smem_dst),
      "l"(global_src), "r"(int(pred)));
}
__device__ inline void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ inline void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Issues the copies of one BF16 / FP8 tile (16 tokens of kv_head starting at tok0 of page) into a stage's padded rows;
// the whole warp. (TQ3 tiles: IssueTq3TileLane.)
template <KvFormat kFormat, int kHeadDim>
__device__ inline void IssueTile(uint8_t* stage, const uint8_t* page, const PageLayout& layout, int kv_head, int tok0,
                                 int lane) {
  using L = TileLayout<kFormat, kHeadDim>;
  static_assert(L::kPadded, "IssueTile: padded formats (BF16, FP8)");
  constexpr int kRowChunks = L::kCodeBytes / 16;
  constexpr int kCodeChunks = L::kTile * kRowChunks;
  const uint8_t* k_src = page + layout.k_codes_offset(kv_head, tok0);
  const uint8_t* v_src = page + layout.v_codes_offset(kv_head, tok0);
#pragma unroll 4
  for (int c = lane; c < kCodeChunks; c += kWarpSize) {
    const int row = c / kRowChunks;
    const int col = c % kRowChunks;
    CpAsync16(stage + L::kKOffset + row * L::kKStride + col * 16, k_src + c * 16);
    CpAsync16(stage + L::kVOffset + row * L::kVStride + col * 16, v_src + c * 16);
  }
  if constexpr (L::kScaleBytes > 0) {
    constexpr int kScaleChunks = L::kTile * L::kScaleBytes / 16;  // 4 (fp32) or 2 (fp16)
    if (lane < kScaleChunks) {
      CpAsync16(stage + L::kKScaleOffset + lane * 16, page + layout.k_scale_offset(kv_head, tok0) + lane * 16);
    } else if (lane < 2 * kScaleChunks) {
      const int c = lane - kScaleChunks;
      CpAsync16(stage + L::kVScaleOffset + c * 16, page + layout.v_scale_offset(kv_head, tok0) + c * 16);
    }
  }
}

// An FP8 tile's staged scale (fp32) of token.
__device__ inline float StagedFp8Scale(const uint8_t* scales, int token) {
  return reinterpret_cast<const float*>(scales)[token];
}

// The CTA's 4 warp states (staged in shared memory: out [warps][kMaxGroup] rows of kRowWords (dim d at
// d + d / 32 with kPadded, else d), running max and sum [warps][kMaxGroup]) merged into one partial state per query
// head of the group (FlashDecoding-style). The warps' weights are computed once per head (v12; v11 per element).
// kWarpRows = combine rows per warp (kMaxGroup; v17: 16 for two head tiles). v25: one warp per head (heads warp,
// warp + kWarps, ...), its lanes over the dims: v12-v24 walked the heads one after another with all threads, a chain
// of shared loads, exp2 / division / log2 per head that took most of the kernels' ~3 us epilogue. Same arithmetic in
// the same order per element, so the same bits.
// kPairedKv (v27): rows 0-3 hold their head's output in virtual dims 0-127, rows 4-7 in 128-255 (the other half
// is the junk product of the other head's values); the states have kHeadDim / 2 dims.
template <int kHeadDim, int kRowWords = kHeadDim, bool kPadded = false, int kWarpRows = kMaxGroup,
          int kWarps = kDecodeWarps, bool kPairedKv = false>
__device__ inline void WritePartialStates(const DecodeParams& p, const HeadTile& heads, const float* warp_out,
                                          const float* warp_max, const float* warp_sum) {
  const size_t state_base = size_t(p.item_offset + blockIdx.x) * p.num_q_heads + size_t(heads.first_head);
  const int lane = threadIdx.x % kWarpSize;
  for (int h = threadIdx.x / kWarpSize; h < heads.rows; h += kWarps) {
    if (!RowIsReal<kPairedKv>(heads, h)) continue;  // a paired CTA's empty rows (groups < 4)
    float max_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) max_all = fmaxf(max_all, warp_max[w * kWarpRows + h]);
    float weight[kWarps];
    float lse = -INFINITY;
    if (max_all != -INFINITY) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        weight[w] = exp2f(warp_max[w * kWarpRows + h] - max_all);
        sum += warp_sum[w * kWarpRows + h] * weight[w];
      }
      const float inv_sum = 1.0f / sum;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) weight[w] *= inv_sum;
      lse = max_all + log2f(sum);
    } else {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) weight[w] = 0.0f;
    }
    constexpr int kStateDim = kPairedKv ? kHeadDim / 2 : kHeadDim;
    const int first_dim = kPairedKv && h >= kPairHalfRows ? kStateDim : 0;
    for (int dim = lane; dim < kStateDim; dim += kWarpSize) {
      const int src = first_dim + dim;
      float out = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        out += warp_out[(w * kWarpRows + h) * kRowWords + src + (kPadded ? src / 32 : 0)] * weight[w];
      }
      p.part_out[(state_base + RowHead<kPairedKv>(heads, h)) * kStateDim + dim] = out;
    }
    if (lane == 0) p.part_lse[state_base + RowHead<kPairedKv>(heads, h)] = lse;
  }
}

// Query fragments (scaled into base 2, split hi + lo), built once per CTA in shared memory for the 4 warps:
// q_frag[k-step][lane] = {hi (k 2t, 2t + 1), hi (k 2t + 8, 2t + 9), lo ..., lo ...} of head g = lane / 4, the
// reduction index k permuted by KDim (the key layout). v17: kHeadTiles 8-head tiles, q_frag[tile][k-step][lane]
// (tile 1 = the CTA's query rows 8-15).
// v25: split in two so that the query's global loads go out before the prologue's page copies (behind them they
// waited for the copies to drain): LoadQueryFragmentInputs reads this thread's query values into registers,
// BuildQueryFragments (after the copies are issued) scales, splits and stores them.
template <int kHeadDim, int kHeadTiles>
struct QueryFragmentInputs {
  static constexpr int kElems = kHeadTiles * (kHeadDim / 16) * kWarpSize / kDecodeThreads;  // fragments per thread
  float v[kElems][4];  // [fragment][2 half + el]
};
// Fragment e = threadIdx.x + kDecodeThreads i: its query row and the dims of its four values (half, el).
template <KvFormat kFormat, int kHeadDim>
struct QueryFragmentPlace {
  int row;
  int dims[4];
  __device__ QueryFragmentPlace(int e) {
    constexpr int kMTiles = kHeadDim / 16;
    const int tile = e / (kMTiles * kWarpSize);
    const int kstep = e / kWarpSize - tile * kMTiles;
    const int ln = e % kWarpSize;
    row = kMaxGroup * tile + (ln >> 2);
    const int tt = ln & 3;
    const int block = kstep / 8;
    const int jj = kstep % 8;
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // a0a1 (rho = 2 jj), a4a5 (rho = 2 jj + 1)
#pragma unroll
      for (int el = 0; el < 2; ++el) dims[2 * half + el] = block * kBlockDims + KDim<kFormat>(tt, 2 * jj + half, el);
    }
  }
};
template <KvFormat kFormat, int kHeadDim, int kHeadTiles = 1>
__device__ inline void LoadQueryFragmentInputs(const DecodeParams& p, const CudaWorkItem& item, const HeadTile& heads,
                                               QueryFragmentInputs<kHeadDim, kHeadTiles>& in) {
#pragma unroll
  for (int i = 0; i < in.kElems; ++i) {
    const QueryFragmentPlace<kFormat, kHeadDim> place(threadIdx.x + kDecodeThreads * i);
    const float* q_row = p.q + (size_t(item.seq) * p.num_q_heads + heads.first_head + place.row) * kHeadDim;
#pragma unroll
    for (int k = 0; k < 4; ++k) in.v[i][k] = place.row < heads.rows ? q_row[place.dims[k]] : 0.0f;
  }
}
template <KvFormat kFormat, int kHeadDim, int kHeadTiles = 1>
__device__ inline void BuildQueryFragments(const DecodeParams& p, const QueryFragmentInputs<kHeadDim, kHeadTiles>& in,
                                           uint4* q_frag) {
#pragma unroll
  for (int i = 0; i < in.kElems; ++i) {
    uint32_t regs[4];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint16_t hi[2];
      uint16_t lo[2];
#pragma unroll
      for (int el = 0; el < 2; ++el) {
        const float v = in.v[i][2 * half + el] * p.q_scale;
        hi[el] = ToOperand<kFormat>(v);
        lo[el] = ToOperand<kFormat>(v - FromOperand<kFormat>(hi[el]));
      }
      regs[half] = Pack(hi[0], hi[1]);
      regs[2 + half] = Pack(lo[0], lo[1]);
    }
    q_frag[threadIdx.x + kDecodeThreads * i] = make_uint4(regs[0], regs[1], regs[2], regs[3]);
  }
}

// kHeadTiles (v17): 1, or 2 for CTAs of 9-16 query heads: the score MMA's rows 8-15 (zero queries with one tile)
// take heads 8-15, so the score MMAs stay as they are; the softmax state, P^T fragments, value MMAs (a second
// n = 8 head tile against the same V fragments), output accumulators and combine rows double. Tile 1's code sits in
// `if constexpr` blocks next to tile 0's, so kHeadTiles = 1 compiles to exactly the v16 PTX.
template <KvFormat kFormat, int kHeadDim, int kHeadTiles = 1>
__global__ void __launch_bounds__(kDecodeThreads, (TileLayout<kFormat, kHeadDim, kHeadTiles>::kCtasPerSm))
    DecodePartialKernel(DecodeParams p) {
  // BF16 pages (FP8 and TQ3 run DecodePartialTransposedKernel; the generic kernel's FP8 / TQ3 paths were removed in
  // session 5, see docs/cuda-notes.md "Build switches").
  static_assert(kFormat == KvFormat::kBf16, "DecodePartialKernel: BF16 pages");
  static_assert(kHeadTiles == 1 || kHeadTiles == 2, "one or two head tiles");
  using L = TileLayout<kFormat, kHeadDim, kHeadTiles>;
  constexpr int kRows = kMaxGroup * kHeadTiles;  // query rows of the CTA (rows >= heads.rows are zero queries)
  constexpr int kKBlockDims = KBlockDims<kHeadDim>();
  constexpr int kBlocks = kHeadDim / kKBlockDims;
  constexpr int kBlockSteps = kKBlockDims / 16;  // k-steps per block (8; 4 at head_dim 64)
  constexpr int kMTiles = kHeadDim / 16;
  constexpr int kTile = kCudaKeyTileTokens;
  extern __shared__ __align__(16) uint8_t smem[];
  uint4* q_frag = reinterpret_cast<uint4*>(smem);  // [k-step][lane]: {hi a0a1, hi a4a5, lo a0a1, lo a4a5}
  uint8_t* stages_base = smem + L::kQFragBytes;

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int g = lane >> 2;  // MMA group id: head row (QK), key row (K load), dim rows (V)
  const int t = lane & 3;   // thread in group
  MINIMAKV_TIMELINE_ENTRY(int(kFormat));
  const HeadTile heads = CtaHeadTile(p);
  const int kv_head = heads.kv_head;
  const CudaWorkItem item = p.items[blockIdx.x];
  if (!TriggerAfterLoop(p)) AllowDependentLaunch();

  const int page_tokens = p.layout.page_tokens;
  const int tiles_per_page = page_tokens / kTile;
  const int num_pages = item.page_end - item.page_begin;
  const int num_tiles = (num_pages - 1) * tiles_per_page + (item.last_tokens + kTile - 1) / kTile;
  const size_t page_bytes = p.layout.page_bytes();
  uint8_t* my_stages = stages_base + warp * L::kStages * L::kStageBytes;
  // Prologue: the first kStages - 1 tiles of this warp in flight before anything else; their page ids and the
  // query loaded first (v25: one round trip for all of them, not one per tile and the query behind the copies).
  QueryFragmentInputs<kHeadDim, kHeadTiles> query_inputs;
  LoadQueryFragmentInputs<kFormat, kHeadDim, kHeadTiles>(p, item, heads, query_inputs);
  int first_ids[L::kStages - 1];
#pragma unroll
  for (int s = 0; s < L::kStages - 1; ++s) {
    const int tile = warp + kDecodeWarps * s;
    first_ids[s] = tile < num_tiles ? p.page_ids[item.page_begin + tile / tiles_per_page] : 0;
  }
#pragma unroll
  for (int s = 0; s < L::kStages - 1; ++s) {
    const int tile = warp + kDecodeWarps * s;
    if (tile < num_tiles) {
      IssueTile<kFormat, kHeadDim>(my_stages + s * L::kStageBytes, p.pages + size_t(first_ids[s]) * page_bytes,
                                   p.layout, kv_head, kTile * (tile % tiles_per_page), lane);
    }
    CpAsyncCommit();
  }

  BuildQueryFragments<kFormat, kHeadDim, kHeadTiles>(p, query_inputs, q_frag);
  __syncthreads();
  MINIMAKV_TIMELINE_STAMP_CLOCK(int(kFormat), ready_ns, ready_clk);

  float row_max = -INFINITY;  // head g, uniform over the 4 threads of the group
  float row_sum = 0.0f;       // head g, this thread's keys (reduced at the end)
  float o_acc[kMTiles][4];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) o_acc[m][0] = o_acc[m][1] = o_acc[m][2] = o_acc[m][3] = 0.0f;
  // Head tile 1 (kHeadTiles = 2): head 8 + g, O columns 8 + 2t, 9 + 2t.
  float row_max_t1 = -INFINITY;
  float row_sum_t1 = 0.0f;
  float o_acc_t1[kHeadTiles == 2 ? kMTiles : 1][4];
  if constexpr (kHeadTiles == 2) {
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) o_acc_t1[m][0] = o_acc_t1[m][1] = o_acc_t1[m][2] = o_acc_t1[m][3] = 0.0f;
  }

  // The page id of the next tile to issue is loaded one iteration early, so its global-load latency is not on
  // the warp's critical path.
  auto page_id_of = [&](int tile) { return tile < num_tiles ? p.page_ids[item.page_begin + tile / tiles_per_page] : 0; };
  int ahead_page_id = page_id_of(warp + kDecodeWarps * (L::kStages - 1));
  int iteration = 0;
  for (int tile = warp; tile < num_tiles; tile += kDecodeWarps, ++iteration) {
    {  // keep kStages - 1 tiles ahead in flight
      const int ahead = tile + kDecodeWarps * (L::kStages - 1);
      if (ahead < num_tiles) {
        IssueTile<kFormat, kHeadDim>(my_stages + ((iteration + L::kStages - 1) % L::kStages) * L::kStageBytes,
                                     p.pages + size_t(ahead_page_id) * page_bytes, p.layout, kv_head,
                                     kTile * (ahead % tiles_per_page), lane);
      }
      CpAsyncCommit();
      ahead_page_id = page_id_of(ahead + kDecodeWarps);
    }
    CpAsyncWait<L::kStages - 1>();
    __syncwarp();
    const uint8_t* stage = my_stages + (iteration % L::kStages) * L::kStageBytes;
    const int page_local = tile / tiles_per_page;
    const int tile_in_page = tile % tiles_per_page;
    const int page_valid = page_local == num_pages - 1 ? item.last_tokens : page_tokens;
    const int valid = min(kTile, page_valid - kTile * tile_in_page);

    // ---- scores: keys g (n-tile 0) and 8 + g (n-tile 1); masked keys read the last valid one. One accumulator
    // per (block, query part) keeps the MMA dependency chains at 8.
    constexpr int kQParts = 2;
    float s0[kBlocks][kQParts][4];
    float s1[kBlocks][kQParts][4];
#pragma unroll
    for (int block = 0; block < kBlocks; ++block) {
#pragma unroll
      for (int part = 0; part < kQParts; ++part) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s0[block][part][i] = s1[block][part][i] = 0.0f;
      }
    }
    const uint8_t* key_a = stage + L::kKOffset + min(g, valid - 1) * L::kKStride;
    const uint8_t* key_b = stage + L::kKOffset + min(8 + g, valid - 1) * L::kKStride;
#pragma unroll
    for (int block = 0; block < kBlocks; ++block) {
      uint32_t ka[16];
      uint32_t kb[16];
      LoadExpandK<kFormat, kKBlockDims>(key_a, block, t, ka);
      LoadExpandK<kFormat, kKBlockDims>(key_b, block, t, kb);
#pragma unroll
      for (int jj = 0; jj < kBlockSteps; ++jj) {
        const uint4 qf = q_frag[(block * 8 + jj) * kWarpSize + lane];  // (block > 0 only with 8 k-steps per block)
        if constexpr (kHeadTiles == 1) {
          Mma<kFormat>(s0[block][0], qf.x, 0u, qf.y, 0u, ka[2 * jj], ka[2 * jj + 1]);
          Mma<kFormat>(s1[block][0], qf.x, 0u, qf.y, 0u, kb[2 * jj], kb[2 * jj + 1]);
          if constexpr (kQParts == 2) {
            Mma<kFormat>(s0[block][kQParts - 1], qf.z, 0u, qf.w, 0u, ka[2 * jj], ka[2 * jj + 1]);
            Mma<kFormat>(s1[block][kQParts - 1], qf.z, 0u, qf.w, 0u, kb[2 * jj], kb[2 * jj + 1]);
          }
        } else {  // rows 8-15 of the A operand (registers a1, a3) = head tile 1's query fragments
          const uint4 qt = q_frag[(kMTiles + block * 8 + jj) * kWarpSize + lane];
          Mma<kFormat>(s0[block][0], qf.x, qt.x, qf.y, qt.y, ka[2 * jj], ka[2 * jj + 1]);
          Mma<kFormat>(s1[block][0], qf.x, qt.x, qf.y, qt.y, kb[2 * jj], kb[2 * jj + 1]);
          Mma<kFormat>(s0[block][kQParts - 1], qf.z, qt.z, qf.w, qt.w, ka[2 * jj], ka[2 * jj + 1]);
          Mma<kFormat>(s1[block][kQParts - 1], qf.z, qt.z, qf.w, qt.w, kb[2 * jj], kb[2 * jj + 1]);
        }
      }
    }
    float score[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float score_t1[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // head 8 + g: accumulator rows g + 8 (c2, c3)
#pragma unroll
    for (int block = 0; block < kBlocks; ++block) {
#pragma unroll
      for (int part = 0; part < kQParts; ++part) {
        score[0] += s0[block][part][0];
        score[1] += s0[block][part][1];
        score[2] += s1[block][part][0];
        score[3] += s1[block][part][1];
        if constexpr (kHeadTiles == 2) {
          score_t1[0] += s0[block][part][2];
          score_t1[1] += s0[block][part][3];
          score_t1[2] += s1[block][part][2];
          score_t1[3] += s1[block][part][3];
        }
      }
    }
    // This thread's keys: 2t, 2t + 1, 8 + 2t, 9 + 2t (S columns), for head g (S row).
    const int keys[4] = {2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (keys[i] >= valid) score[i] = -INFINITY;
    }
    float tile_max = fmaxf(fmaxf(score[0], score[1]), fmaxf(score[2], score[3]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, 2));
    const float new_max = fmaxf(row_max, tile_max);  // finite: key 0 of a tile is always valid
    const float alpha = exp2f(row_max - new_max);
    row_max = new_max;
    float prob[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) prob[i] = exp2f(score[i] - new_max);
    row_sum = row_sum * alpha + (prob[0] + prob[1]) + (prob[2] + prob[3]);

    // P^T fragments: b0b1 = keys (2t, 2t+1), b2b3 = keys (8+2t, 9+2t) of head g.
    uint32_t pb_hi[2];
    uint32_t pb_lo[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint16_t h0 = ToOperand<kFormat>(prob[2 * half]);
      const uint16_t h1 = ToOperand<kFormat>(prob[2 * half + 1]);
      pb_hi[half] = Pack(h0, h1);
      pb_lo[half] = Pack(ToOperand<kFormat>(prob[2 * half] - FromOperand<kFormat>(h0)),
                         ToOperand<kFormat>(prob[2 * half + 1] - FromOperand<kFormat>(h1)));
    }
    // Head tile 1: the same softmax step and P^T fragments for head 8 + g (key masking as above).
    uint32_t pb_hi_t1[2];
    uint32_t pb_lo_t1[2];
    float alpha_t1 = 1.0f;
    if constexpr (kHeadTiles == 2) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (keys[i] >= valid) score_t1[i] = -INFINITY;
      }
      float max_t1 = fmaxf(fmaxf(score_t1[0], score_t1[1]), fmaxf(score_t1[2], score_t1[3]));
      max_t1 = fmaxf(max_t1, __shfl_xor_sync(kFullWarpMask, max_t1, 1));
      max_t1 = fmaxf(max_t1, __shfl_xor_sync(kFullWarpMask, max_t1, 2));
      const float new_max_t1 = fmaxf(row_max_t1, max_t1);
      alpha_t1 = exp2f(row_max_t1 - new_max_t1);
      row_max_t1 = new_max_t1;
      float prob_t1[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) prob_t1[i] = exp2f(score_t1[i] - new_max_t1);
      row_sum_t1 = row_sum_t1 * alpha_t1 + (prob_t1[0] + prob_t1[1]) + (prob_t1[2] + prob_t1[3]);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint16_t h0 = ToOperand<kFormat>(prob_t1[2 * half]);
        const uint16_t h1 = ToOperand<kFormat>(prob_t1[2 * half + 1]);
        pb_hi_t1[half] = Pack(h0, h1);
        pb_lo_t1[half] = Pack(ToOperand<kFormat>(prob_t1[2 * half] - FromOperand<kFormat>(h0)),
                              ToOperand<kFormat>(prob_t1[2 * half + 1] - FromOperand<kFormat>(h1)));
      }
    }
    // Rescale O columns (heads 2t, 2t + 1) by their heads' alpha.
    const float f0 = __shfl_sync(kFullWarpMask, alpha, 4 * (2 * t));
    const float f1 = __shfl_sync(kFullWarpMask, alpha, 4 * (2 * t + 1));
    if (__any_sync(kFullWarpMask, f0 != 1.0f || f1 != 1.0f)) {  // warp-uniform: skipped once the max settles
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        o_acc[m][0] *= f0;
        o_acc[m][1] *= f1;
        o_acc[m][2] *= f0;
        o_acc[m][3] *= f1;
      }
    }
    if constexpr (kHeadTiles == 2) {  // O columns 8 + 2t, 9 + 2t: heads 8 + 2t, 9 + 2t (rows g' = 2t, 2t + 1)
      const float e0 = __shfl_sync(kFullWarpMask, alpha_t1, 4 * (2 * t));
      const float e1 = __shfl_sync(kFullWarpMask, alpha_t1, 4 * (2 * t + 1));
      if (__any_sync(kFullWarpMask, e0 != 1.0f || e1 != 1.0f)) {
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          o_acc_t1[m][0] *= e0;
          o_acc_t1[m][1] *= e1;
          o_acc_t1[m][2] *= e0;
          o_acc_t1[m][3] *= e1;
        }
      }
    }
    // ---- values: keys 2t, 2t+1, 8+2t, 9+2t; pack two keys' values of one dim per register.
    const uint8_t* v_rows = stage + L::kVOffset;
    uint32_t va[kMTiles];
    uint32_t vb[kMTiles];
    uint32_t vc[kMTiles];
    uint32_t vd[kMTiles];
    LoadBf16V<kHeadDim>(v_rows + min(keys[0], valid - 1) * L::kVStride, g, va);
    LoadBf16V<kHeadDim>(v_rows + min(keys[1], valid - 1) * L::kVStride, g, vb);
    LoadBf16V<kHeadDim>(v_rows + min(keys[2], valid - 1) * L::kVStride, g, vc);
    LoadBf16V<kHeadDim>(v_rows + min(keys[3], valid - 1) * L::kVStride, g, vd);
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      const uint32_t a0 = __byte_perm(va[m], vb[m], 0x5410);
      const uint32_t a1 = __byte_perm(va[m], vb[m], 0x7632);
      const uint32_t a2 = __byte_perm(vc[m], vd[m], 0x5410);
      const uint32_t a3 = __byte_perm(vc[m], vd[m], 0x7632);
      Mma<kFormat>(o_acc[m], a0, a1, a2, a3, pb_hi[0], pb_hi[1]);
      Mma<kFormat>(o_acc[m], a0, a1, a2, a3, pb_lo[0], pb_lo[1]);
      if constexpr (kHeadTiles == 2) {  // the same V fragments against head tile 1's P^T
        Mma<kFormat>(o_acc_t1[m], a0, a1, a2, a3, pb_hi_t1[0], pb_hi_t1[1]);
        Mma<kFormat>(o_acc_t1[m], a0, a1, a2, a3, pb_lo_t1[0], pb_lo_t1[1]);
      }
    }
    __syncwarp();  // this stage is refilled by the next iteration's copies
  }
  MINIMAKV_TIMELINE_WARP_DONE(int(kFormat));
  AllowDependentLaunchAfterLoop(p);
  CpAsyncWait<0>();

  // ---- combine the 4 warps (FlashDecoding-style within the CTA), write one partial state per query head.
  // The combine area reuses the stage buffers: wait until every warp is done with them.
  __syncthreads();
  MINIMAKV_TIMELINE_STAMP_CLOCK(int(kFormat), loop_end_ns, loop_end_clk);
  float* warp_out = reinterpret_cast<float*>(stages_base);          // [warps][kRows][kHeadDim]
  float* warp_max = warp_out + kDecodeWarps * kRows * kHeadDim;     // [warps][kRows]
  float* warp_sum = warp_max + kDecodeWarps * kRows;                // [warps][kRows]
  row_sum += __shfl_xor_sync(kFullWarpMask, row_sum, 1);
  row_sum += __shfl_xor_sync(kFullWarpMask, row_sum, 2);
  if (t == 0) {
    warp_max[warp * kRows + g] = row_max;
    warp_sum[warp * kRows + g] = row_sum;
  }
  if constexpr (kHeadTiles == 2) {
    row_sum_t1 += __shfl_xor_sync(kFullWarpMask, row_sum_t1, 1);
    row_sum_t1 += __shfl_xor_sync(kFullWarpMask, row_sum_t1, 2);
    if (t == 0) {
      warp_max[warp * kRows + kMaxGroup + g] = row_max_t1;
      warp_sum[warp * kRows + kMaxGroup + g] = row_sum_t1;
    }
  }
  float* my_out = warp_out + warp * kRows * kHeadDim;
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    const int dim0 = VDim<kFormat, kHeadDim>(g, m, 0);
    const int dim1 = VDim<kFormat, kHeadDim>(g, m, 1);
    my_out[(2 * t) * kHeadDim + dim0] = o_acc[m][0];
    my_out[(2 * t + 1) * kHeadDim + dim0] = o_acc[m][1];
    my_out[(2 * t) * kHeadDim + dim1] = o_acc[m][2];
    my_out[(2 * t + 1) * kHeadDim + dim1] = o_acc[m][3];
    if constexpr (kHeadTiles == 2) {
      my_out[(kMaxGroup + 2 * t) * kHeadDim + dim0] = o_acc_t1[m][0];
      my_out[(kMaxGroup + 2 * t + 1) * kHeadDim + dim0] = o_acc_t1[m][1];
      my_out[(kMaxGroup + 2 * t) * kHeadDim + dim1] = o_acc_t1[m][2];
      my_out[(kMaxGroup + 2 * t + 1) * kHeadDim + dim1] = o_acc_t1[m][3];
    }
  }
  __syncthreads();
  WritePartialStates<kHeadDim, kHeadDim, false, kRows>(p, heads, warp_out, warp_max, warp_sum);
  KeepStepOrder(p);
  MINIMAKV_TIMELINE_SYNC();
  MINIMAKV_TIMELINE_STAMP(int(kFormat), exit_ns);
}

// ---------------------------------------------------------------------------------------------------------
// Transposed partial kernel: TQ3 (v6+) and, since v8, FP8. Same work items, staging and combine as
// DecodePartialKernel; the per-tile work is reorganized to cut warp instructions (counts in docs/cuda-notes.md):
//  1. Scores transposed: S^T[16 keys][8 heads] = K[16 keys][16 dims] * Q^T[16 dims][8 heads]. The expanded
//     keys g and 8 + g fill all 16 rows of the A operand and the query is the 2-register B operand loaded
//     straight from shared memory: half the MMAs of S[16 heads][8 keys] (rows 8-15 there are empty heads) and
//     no register copies to assemble {q, 0, q, 0} operand quads (~200 moves per tile in v5's SASS).
//  2. P^T for the value MMA comes out of the S^T accumulators (fp16-packed) with one movmatrix (8x8 transpose)
//     per 8 keys.
//  3. Value codes of two keys share one nibble selector (key a in even nibbles, key b in odd ones), so the
//     lookups and the placing prmt directly produce the key-paired registers of the value MMA.
//  4. prmt through inline PTX (__byte_perm masks its selector with 0x7777 first: one more op per lookup),
//     tile / page positions tracked incrementally (no integer division per tile), tile copies fully unrolled.
//  5. (v8) TQ3 is software-pipelined (kPipeline): the score phase of a warp's tile i and the value phase of
//     its tile i - 1 are one instruction stream. FP8 uses the same structure with hardware E4M3 conversions
//     (value bytes of two keys interleaved by one prmt before the conversion: key-paired registers directly).
//  6. (v9, v15) TQ3 scores on the integer tensor cores (kImma, mma m16n8k32 s8): keys as one exact int8 digit (the
//     signed unit) from one prmt per 4 coordinates, the query as three int8 digits of a per-head 24-bit fixed point.

__device__ inline uint32_t Prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}
// (a & mask) | (b & ~mask) as one LOP3. Written as C++ with the two complementary masks, nvcc emits two LOP3 (an AND
// of each operand, then an OR-with-AND): 2 ALU instructions more per selector pair word (v14 SASS).
__device__ inline uint32_t BitSelect(uint32_t mask, uint32_t a, uint32_t b) {
  uint32_t d;
  // immLut = F(0xF0, 0xCC, 0xAA) for F(m, a, b) = (m & a) | (~m & b): 0xC0 | 0x0A.
  asm("lop3.b32 %0, %1, %2, %3, 0xCA;\n" : "=r"(d) : "r"(mask), "r"(a), "r"(b));
  return d;
}
// lo + (hi << 16) for 16-bit lo, hi as an integer multiply-add (FMA pipe). Written in C++, nvcc packs the two halves
// with a mov (PRMT on the ALU pipe, the TQ3 kernel's busiest: v14 SASS).
__device__ inline uint32_t PackHalvesOnFmaPipe(uint32_t lo, uint32_t hi) {
  uint32_t d;
  asm("mad.lo.u32 %0, %1, 65536, %2;\n" : "=r"(d) : "r"(hi), "r"(lo));
  return d;
}
// 8x8 b16 matrix in the mma fragment layout (lane l: row l / 4, columns 2 (l % 4), +1) -> its transpose, same layout.
__device__ inline uint32_t TransposeB16x8x8(uint32_t x) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(x));
  return d;
}
// 2^x with the SFU's approximation (max relative error ~2^-22; ftz: results below 2^-126 become 0, the same as
// a probability that underflows fp16 anyway). exp2f adds range-fixup instructions around the same MUFU.EX2.
__device__ inline float Exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ inline uint32_t PackHalf2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// prmt selectors straight from the TQ3 code words (tq3_codec.h, "Byte layout"): per 32-coordinate group three
// little-endian words W0, W1, W2; nibble n of Wi holds coordinate 8 i + n in bits 0-2 and bit i of coordinate
// 24 + n's index in bit 3. A prmt selector nibble must have bit 3 clear (set, prmt replicates the byte's sign bit),
// so Wi & kTq3IndexNibbles is the selector word of coordinates 8 i .. 8 i + 7 (one LOP3 per 8 codes; the bit-plane
// layout of sessions 1-5 needed ~5 ALU instructions per 8 codes here, docs/cuda-notes.md v14).
constexpr uint32_t kTq3IndexNibbles = 0x77777777u;
// Selector word of the spill coordinates 24 .. 31 (nibble n = coordinate 24 + n): bit i of each nibble gathered from
// bit 3 of the same nibble of word i. Three shifts, two bit-selects and the mask (6 ALU instructions per 8 codes).
__device__ inline uint32_t Tq3SpillSelectors(uint32_t w0, uint32_t w1, uint32_t w2) {
  const uint32_t bits21 = ((w1 >> 2) & 0x22222222u) | ((w2 >> 1) & ~0x22222222u);  // bit 1 from W1, bit 2 from W2
  const uint32_t bits210 = ((w0 >> 3) & 0x11111111u) | (bits21 & ~0x11111111u);     // bit 0 from W0
  return bits210 & kTq3IndexNibbles;  // bit 3 held junk (the next nibble's bit 0 of W2 >> 1)
}
// sel >> 16 for a selector word (every nibble's bit 3 clear) on the FMA pipe instead of the ALU pipe (the TQ3 loops'
// busiest, v24): the high half as an fp16 plus -0, which ptxas emits as one HADD2 reading the operand's .H1 half. Exact:
// with bits 11 and 15 clear the half is never an Inf, NaN or -0, and fp16 adds keep subnormals. Only the low 16 bits
// of the result are defined (both halves hold the same value), which is all prmt reads of a selector.
__device__ inline uint32_t UpperSelectorHalf(uint32_t sel) {
  uint32_t d;
  asm("{\n .reg .b16 lo, hi, sum, neg_zero;\n mov.b16 neg_zero, 0x8000;\n mov.b32 {lo, hi}, %1;\n"
      " add.rn.f16 sum, hi, neg_zero;\n mov.b32 %0, {sum, sum};\n}\n"
      : "=r"(d)
      : "r"(sel));
  return d;
}
__device__ inline uint32_t SubHalf2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// Indices in nibbles 0-3 of sel -> signed units (centroids x alpha, exact in fp16) as two fp16x2 registers:
// (c0, c1), (c2, c3). Tq3Tables has the byte trick.
__device__ inline void Tq3Lookup4(uint32_t sel, const Tq3Tables& tab, uint32_t& out01, uint32_t& out23) {
  const uint32_t biased4 = Prmt(tab.unit_pos, tab.unit_neg, sel);  // byte n = unit of code n + bias
  // bytes (u0, 0x64, u1, 0x64) and (u2, 0x64, u3, 0x64): fp16x2 (1024 + u0, 1024 + u1), (1024 + u2, 1024 + u3)
  out01 = SubHalf2(Prmt(biased4, tab.high_bytes, 0x4140u), tab.offset);
  out23 = SubHalf2(Prmt(biased4, tab.high_bytes, 0x4342u), tab.offset);
}
// The value side's selectors of a key pair (a, b): interleave(wa[i], wb[i], x[i], y[i]) merges the two keys' raw
// words i (bit 3 of every nibble still its spill bit) into two words x, y; first[i] / second[i] (i < 3) are them
// masked to selector nibbles, first[3] / second[3] the spill gathers of x / y (Tq3SpillSelectors). The interleaves:
// Tq3BytePairSelectors (by bytes) and Tq3PairSelectors (by nibbles) below.
template <typename Interleave>
__device__ inline void Tq3InterleavedSelectors(const uint32_t (&wa)[3], const uint32_t (&wb)[3], Interleave interleave,
                                               uint32_t (&first)[4], uint32_t (&second)[4]) {
  uint32_t x[3];
  uint32_t y[3];
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    interleave(wa[i], wb[i], x[i], y[i]);
    first[i] = x[i] & kTq3IndexNibbles;
    second[i] = y[i] & kTq3IndexNibbles;
  }
  first[3] = Tq3SpillSelectors(x[0], x[1], x[2]);
  second[3] = Tq3SpillSelectors(y[0], y[1], y[2]);
}
// v27, head_dim 256: the two keys' words interleaved by bytes instead (one prmt per 4 coordinates, no shift):
// lo[i] = bytes (a0, b0, a1, b1) of words i, i.e. nibbles (a 8 i, a 8 i + 1, b 8 i, b 8 i + 1, a + 2, a + 3, b + 2,
// b + 3), hi[i] the same for nibbles 4-7; masked (i < 3) or the spill gather (i = 3), as in Tq3PairSelectors.
// A lookup of a 4-nibble half thus yields coordinates c, c + 1 of both keys: Tq3LookupPairs places (a, b) of c
// and of c + 1 into their fp16x2 registers. 6 instead of 9 ALU-pipe instructions per 3 words of a key pair.
__device__ inline void Tq3BytePairSelectors(const uint32_t (&wa)[3], const uint32_t (&wb)[3], uint32_t (&lo)[4],
                                            uint32_t (&hi)[4]) {
  Tq3InterleavedSelectors(
      wa, wb, [](uint32_t a, uint32_t b, uint32_t& x, uint32_t& y) {
        x = Prmt(a, b, 0x5140u);
        y = Prmt(a, b, 0x7362u);
      },
      lo, hi);
}
// Nibbles (a c, a c + 1, b c, b c + 1) of sel -> fp16x2 (a, b) of coordinate c and of c + 1 (Tq3Lookup4's byte trick).
__device__ inline void Tq3LookupPairs(uint32_t sel, const Tq3Tables& tab, uint32_t& out_c, uint32_t& out_c1) {
  const uint32_t biased4 = Prmt(tab.unit_pos, tab.unit_neg, sel);  // bytes (a c, a c + 1, b c, b c + 1) + bias
  out_c = SubHalf2(Prmt(biased4, tab.high_bytes, 0x4240u), tab.offset);
  out_c1 = SubHalf2(Prmt(biased4, tab.high_bytes, 0x4341u), tab.offset);
}
// Value side: the value MMA's A operand pairs two keys a, b of one coordinate per register, so the selector nibbles
// of the two keys are interleaved first, on the raw words (bit 3 of every nibble still carries its spill bit):
// byte k of x[i] = (a's nibble 2 k, b's nibble 2 k), byte k of y[i] = (a's nibble 2 k + 1, b's nibble 2 k + 1), one
// shift and one bit-select each. Then even[r] (r < 3) = x[r] masked: byte k = (a, b) indices of coordinate 8 r + 2 k;
// odd[r]: coordinate 8 r + 2 k + 1; even[3] / odd[3] apply the spill gather to x / y (bit 3 of x's nibble 2 k is a's
// spill bit, of nibble 2 k + 1 b's): coordinates 24 + 2 k / 24 + 2 k + 1. Tq3Lookup4(even[r] >> 16 j) thus yields the
// (a, b) pairs of coordinates 8 r + 4 j and 8 r + 4 j + 2, odd[r] those of + 1 and + 3. 30 ALU instructions per 64
// codes (48 with the bit planes of sessions 1-5).
__device__ inline void Tq3PairSelectors(const uint32_t (&wa)[3], const uint32_t (&wb)[3], uint32_t (&even)[4],
                                        uint32_t (&odd)[4]) {
  Tq3InterleavedSelectors(
      wa, wb, [](uint32_t a, uint32_t b, uint32_t& x, uint32_t& y) {
        x = BitSelect(0x0F0F0F0Fu, a, b << 4);
        y = BitSelect(0x0F0F0F0Fu, a >> 4, b);
      },
      even, odd);
}

// ---- v9 / v15: TQ3 scores on the integer tensor cores (kImma in the kernel; the v8 fp16 score path went in v10).
// v15: the key units of tq3_codec.h are the integers 13, 40, 71, 114 (kTq3MagnitudeUnits, magnitudes = units /
// alpha), so a signed unit IS one int8 digit: one prmt of an 8-byte table (byte index = sign << 2 | magnitude, the
// code itself; bytes 0-3 +unit, 4-7 -unit) turns four 3-bit codes into four int8 key operands. (v9-v14: the units
// 175/512 .. 3 were split as units * 512 = 256 hi + lo into two digits: two prmt per 4 codes, 5 IMMA per k-step.)
// The query (scaled into base 2) is a 24-bit fixed point per head, Q = round(q * kTq3QueryFixedMax / max |q|),
// split into three int8 digits Q = 65536 q2 + 256 q1 + q0 (|q2| <= 127, q1, q0 in [-128, 127]); mma m16n8k32 s8
// gives the exact int32 sums S_k = sum unit x q_k (3 IMMA per k-step), and unit . Q = 2^16 S2 + 2^8 S1 + S0 is
// combined once per tile in fp32, times max |q| / (kTq3QueryFixedMax * alpha) (score_unit). |S_k| <= 114 x 128 x d
// = 3.7e6 at d = 256, so 2^8 S1 + S0 (< 9.7e8) stays in int32. All digit products are kept: the score is exact up
// to the query's fixed-point rounding and one fp32 rounding (v9-v14 dropped lo x q0). Measured (v9 run 1): a 16-bit
// query (two digits) gave LSE errors up to 5.2e-4 relative in the GPU tests (bound 2e-4; the test's random queries
// and keys are nearly orthogonal, so the LSE is small against |q| |k|), hence three digits.
constexpr int kTq3DigitBits = 8;
constexpr int kTq3DigitBase = 1 << kTq3DigitBits;  // weight of a query digit over the next lower one
constexpr int kTq3QueryFixedMax = (127 * kTq3DigitBase + 127) * kTq3DigitBase + 127;  // largest |Q|: digits fit int8
__host__ __device__ constexpr float Tq3Unit(int m) {
  return m == 0 ? kTq3Unit0 : m == 1 ? kTq3Unit1 : m == 2 ? kTq3Unit2 : kTq3Unit3;
}
constexpr bool Tq3UnitsAreInt8() {
  for (int m = 0; m < 4; ++m) {
    if (Tq3Unit(m) != float(int(Tq3Unit(m))) || Tq3Unit(m) < 0.0f || Tq3Unit(m) > 127.0f) return false;
  }
  return true;
}
static_assert(Tq3UnitsAreInt8(), "TQ3 units (tq3_codec.h) must be integers in [0, 127]: one int8 digit, negated too");

// int8 key tables for prmt: byte m of pos = +unit m, of neg = -unit m (prmt's bytes 4-7: codes with the sign bit).
struct Tq3DigitTables {
  uint32_t pos, neg;
};
__device__ inline Tq3DigitTables MakeTq3DigitTables() {
  Tq3DigitTables t{0, 0};
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int unit = int(Tq3Unit(m));
    t.pos |= uint32_t(uint8_t(int8_t(unit))) << (8 * m);
    t.neg |= uint32_t(uint8_t(int8_t(-unit))) << (8 * m);
  }
  return t;
}

// D = A B + D with A 16 x 32 s8 (a0, a2: row g, k 4t..4t+3 and 16+4t..; a1, a3: row 8 + g), B 32 x 8 s8 (b0: k
// 4t..4t+3, b1: k 16+4t.., column g), D 16 x 8 s32 (the m16n8k16 f32 accumulator layout).
__device__ inline void MmaS8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                             uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The raw query values a warp rotates in BuildTq3DigitFragments (rows warp, warp + kWarps, ...; lane + 32 k of each),
// loaded by LoadTq3QueryRows before the prologue's page copies are issued (v25): behind ~70 KB of copies per CTA the
// loads waited for the copies to drain (TQ3 prologue ~7 us at batch 8 against ~5 us for FP8, v25 timeline).
template <int kHeadDim, int kHeadTiles, int kWarps>
struct Tq3QueryRows {
  static constexpr int kRowsPerWarp = (kMaxGroup * kHeadTiles + kWarps - 1) / kWarps;
  float v[kRowsPerWarp][kHeadDim / kWarpSize];
};
// kPairedKv (v27): the query rows have kHeadDim / 2 dims; rows 0-3 (the pair's first head) fill the first half of
// the virtual row, rows 4-7 the second, the other half stays zero (its keys' codes then add nothing to the scores).
template <int kHeadDim, int kHeadTiles, int kWarps, bool kPairedKv = false>
__device__ inline void LoadTq3QueryRows(const DecodeParams& p, const CudaWorkItem& item, const HeadTile& heads,
                                        Tq3QueryRows<kHeadDim, kHeadTiles, kWarps>& rows) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  constexpr int kQueryDim = kPairedKv ? kHeadDim / 2 : kHeadDim;
  constexpr int kPerLane = kHeadDim / kWarpSize;
#pragma unroll
  for (int j = 0; j < rows.kRowsPerWarp; ++j) {
    const int row = warp + kWarps * j;
    const bool real = row < kMaxGroup * kHeadTiles && RowIsReal<kPairedKv>(heads, row);  // else zeros (amax 0)
    const float* q_row =
        p.q + (size_t(item.seq) * p.num_q_heads + heads.first_head + (real ? RowHead<kPairedKv>(heads, row) : 0)) *
                  kQueryDim;
    const int half = row >= kPairHalfRows ? 1 : 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      if constexpr (kPairedKv) {
        rows.v[j][k] = real && k / (kPerLane / 2) == half ? q_row[lane + kWarpSize * (k % (kPerLane / 2))] : 0.0f;
      } else {
        rows.v[j][k] = real ? q_row[lane + kWarpSize * k] : 0.0f;
      }
    }
  }
}
// Where coordinate dim of rotated query row `row` sits in the CTA's q_rows (v25): 4-float chunks XOR-swizzled within
// their 32-float group, chunk c -> c ^ (4 (row & 1) + (c / 8) % 4), so that the digit builder's float4 reads (lane
// (row, tt) reads dims 32 tt + 8 r + 4 j) fall in 8 different bank groups per quarter warp; unswizzled every lane of
// a warp read the same bank (a 32-way conflict on each of its 16 scalar loads, most of the TQ3 prologue at d 256).
template <int kHeadDim>
__device__ inline int RotatedQueryIndex(int row, int dim) {
  const int chunk = dim >> 2;
  const int swizzled = chunk ^ (((row & 1) << 2) | ((chunk >> 3) & 3));
  return row * kHeadDim + (swizzled << 2) + (dim & 3);
}
// Query digit fragments for the integer score MMAs, once per CTA in shared memory: q_frag[k-step][lane] = {q2 b0,
// q2 b1, q1 b0, q1 b1}, q_frag0[k-step][lane] = {q0 b0, q0 b1} of head g = lane / 4 for k-step (block, r) =
// 4 block + r, where byte e of b0 (b1) is dim 128 block + 32 t + 8 r + e (+ 4): the order in which selector word r
// of the key's group 4 block + t (Wr & kTq3IndexNibbles, r = 3: the spill word) and its upper half present the key's
// coordinates. q_amax[head] = max |q * q_scale| over the head (the fixed-point unit; 0 for an all-zero query).
// v17: kHeadTiles 8-head tiles: rows 8 tile + g, fragments [tile][k-step][lane] (q_frag0 likewise).
template <int kHeadDim, int kHeadTiles = 1, int kWarps = kDecodeWarps, bool kPairedKv = false>
__device__ inline void BuildTq3DigitFragments(const DecodeParams& p, const HeadTile& heads,
                                              const Tq3QueryRows<kHeadDim, kHeadTiles, kWarps>& query,
                                              uint4* q_frag, uint2* q_frag0, float* q_amax, float* q_rows) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  constexpr int kRowsPerWarp = query.kRowsPerWarp;
  constexpr int kPerLane = kHeadDim / kWarpSize;
  // q' = H D q / sqrt(d), one warp per row: signs, Hadamard butterfly and scaling in the CPU's order
  // (cuda_warp_rotation.cuh), so the rotated values are bit-identical to HadamardRotation::Forward's. v12 / v14:
  // 1.0-1.7% faster per step than a separate rotation kernel the TQ3 kernel waited for (code at c09f576). v25: a
  // warp's rows side by side (independent shuffle chains); rows past heads.rows hold zeros (LoadTq3QueryRows).
  if (warp < kMaxGroup * kHeadTiles) {  // (wide CTAs: warps past the rows have none)
    float v[kRowsPerWarp][kPerLane];
    // kPairedKv: each half of a virtual row is rotated as the KV head's own 128-dim vectors were (same signs).
    constexpr int kRotDim = kPairedKv ? kHeadDim / 2 : kHeadDim;
    constexpr int kRotPerLane = kRotDim / kWarpSize;
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        v[j][k] = query.v[j][k] * cuda_detail::SignOf(p.signs, lane + kWarpSize * (k % kRotPerLane));
      }
    }
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
#pragma unroll
      for (int part = 0; part < kPerLane / kRotPerLane; ++part) {
        float rot[kRotPerLane];
#pragma unroll
        for (int k = 0; k < kRotPerLane; ++k) rot[k] = v[j][part * kRotPerLane + k];
        cuda_detail::WarpFwht<kRotDim>(rot, lane);
#pragma unroll
        for (int k = 0; k < kRotPerLane; ++k) v[j][part * kRotPerLane + k] = rot[k];
      }
    }
    float amax[kRowsPerWarp];
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int row = warp + kWarps * j;
      amax[j] = 0.0f;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const float x = v[j][k] * p.inv_sqrt_dim;
        if (row < kMaxGroup * kHeadTiles) q_rows[RotatedQueryIndex<kHeadDim>(row, lane + kWarpSize * k)] = x;
        amax[j] = fmaxf(amax[j], fabsf(x * p.q_scale));
      }
    }
#pragma unroll
    for (int offset = 1; offset < kWarpSize; offset *= 2) {
#pragma unroll
      for (int j = 0; j < kRowsPerWarp; ++j) amax[j] = fmaxf(amax[j], __shfl_xor_sync(kFullWarpMask, amax[j], offset));
    }
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int row = warp + kWarps * j;
      if (lane == 0 && row < kMaxGroup * kHeadTiles) q_amax[row] = amax[j];
    }
  }
  __syncthreads();
  constexpr int kSteps = kHeadDim / 32;
  for (int e = threadIdx.x; e < kHeadTiles * kSteps * kWarpSize; e += kWarps * kWarpSize) {
    const int tile = kHeadTiles == 1 ? 0 : e / (kSteps * kWarpSize);
    const int kstep = e / kWarpSize - tile * kSteps;
    const int ln = e % kWarpSize;
    const int row = kMaxGroup * tile + (ln >> 2);
    const int tt = ln & 3;
    const int block = kstep / 4;
    const int r = kstep % 4;
    const bool real_row = RowIsReal<kPairedKv>(heads, row);
    const float amax = q_amax[row];
    const float to_fixed = amax > 0.0f ? float(kTq3QueryFixedMax) / amax : 0.0f;
    uint32_t d2[2] = {0u, 0u};
    uint32_t d1[2] = {0u, 0u};
    uint32_t d0[2] = {0u, 0u};
    constexpr int kHalf = kTq3DigitBase / 2;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      // (head_dim 64, v16: k-step r of thread tt = selector word 2 (tt & 1) + r of group tt / 2.)
      const int dim0 = kHeadDim == 64 ? 32 * (tt >> 1) + 8 * (2 * (tt & 1) + kstep) + 4 * j
                                      : block * kBlockDims + 32 * tt + 8 * r + 4 * j;
      const float4 quad = real_row ? *reinterpret_cast<const float4*>(q_rows + RotatedQueryIndex<kHeadDim>(row, dim0))
                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float values[4] = {quad.x, quad.y, quad.z, quad.w};  // dims dim0 .. dim0 + 3
#pragma unroll
      for (int byte = 0; byte < 4; ++byte) {
        const float v = values[byte] * p.q_scale;
        const int fixed = min(max(__float2int_rn(v * to_fixed), -kTq3QueryFixedMax), kTq3QueryFixedMax);
        // Floor divisions (arithmetic shifts) with the lower digits centred: q1, q0 in [-128, 127].
        const int q2 = (fixed + kHalf * kTq3DigitBase + kHalf) >> (2 * kTq3DigitBits);
        const int rest = fixed - (q2 << (2 * kTq3DigitBits));
        const int q1 = (rest + kHalf) >> kTq3DigitBits;
        const int q0 = rest - (q1 << kTq3DigitBits);
        d2[j] |= uint32_t(q2 & 0xFF) << (8 * byte);
        d1[j] |= uint32_t(q1 & 0xFF) << (8 * byte);
        d0[j] |= uint32_t(q0 & 0xFF) << (8 * byte);
      }
    }
    q_frag[e] = make_uint4(d2[0], d2[1], d1[0], d1[1]);
    q_frag0[e] = make_uint2(d0[0], d0[1]);
  }
}

// The code runs of one TQ3 tile with the addresses precomputed per lane (dst_lane = the stage's row block + 16 lane:
// K rows at + kKOffset, V rows at + kVOffset; k_lane / v_lane = the runs' sources + 16 lane): one to three rounds of
// 16-byte copies per run; the scales are copied by the caller.
template <typename L>
__device__ inline void IssueTq3TileLane(uint32_t dst_lane, const uint8_t* k_lane, const uint8_t* v_lane, int lane) {
  constexpr int kCodeChunks = L::kTile * L::kPageCodeBytes / 16;  // 96 (d = 256) or 48 16-byte chunks
  constexpr int kRound = 16 * kWarpSize;
  if constexpr (kCodeChunks < kWarpSize) {  // v16, head_dim 64: 24 chunks per run, lanes 0-23
    if (lane < kCodeChunks) {
      CpAsync16Imm<L::kKOffset, 0>(dst_lane, k_lane);
      CpAsync16Imm<L::kVOffset, 0>(dst_lane, v_lane);
    }
    return;
  }
  static_assert(kCodeChunks <= 3 * kWarpSize, "one to three rounds of the warp");
  CpAsync16Imm<L::kKOffset, 0>(dst_lane, k_lane);
  CpAsync16Imm<L::kVOffset, 0>(dst_lane, v_lane);
  if (kCodeChunks >= 2 * kWarpSize || (kCodeChunks > kWarpSize && lane + kWarpSize < kCodeChunks)) {
    CpAsync16Imm<L::kKOffset + kRound, kRound>(dst_lane, k_lane);
    CpAsync16Imm<L::kVOffset + kRound, kRound>(dst_lane, v_lane);
  }
  if (kCodeChunks >= 3 * kWarpSize || (kCodeChunks > 2 * kWarpSize && lane + 2 * kWarpSize < kCodeChunks)) {
    CpAsync16Imm<L::kKOffset + 2 * kRound, 2 * kRound>(dst_lane, k_lane);
    CpAsync16Imm<L::kVOffset + 2 * kRound, 2 * kRound>(dst_lane, v_lane);
  }
}

// One lane's share of a contiguous run of kChunks 16-byte chunks (chunks lane, lane + 32, ...; kChunks a multiple of
// 32): dst_lane + kDstOffset / src_lane = the run's first chunk + 16 lane, the round offsets are immediates.
template <int kChunks, int kDstOffset, int kRound = 0>
__device__ inline void CopyRunLane(uint32_t dst_lane, const uint8_t* src_lane) {
  static_assert(kChunks % kWarpSize == 0, "whole rounds of the warp");
  if constexpr (kRound < kChunks / kWarpSize) {
    CpAsync16Imm<kDstOffset + kRound * 16 * kWarpSize, kRound * 16 * kWarpSize>(dst_lane, src_lane);
    CopyRunLane<kChunks, kDstOffset, kRound + 1>(dst_lane, src_lane);
  }
}

// Value phase of one TQ3 / FP8 tile: O^T[dims][heads] += V^T[dims][16 keys] * P^T (pb: fp16 P^T fragments b0 / b1 of
// keys (2t, 2t + 1) / (8 + 2t, 9 + 2t) per head tile); v_stage = the tile's staged V codes, valid = its valid keys.
// v17: P^T fragments of the head tiles (b0, b1 of tile 0; b0_t1, b1_t1 of tile 1, unused with one tile). Scalars,
// not arrays: with one tile the PTX stays exactly v16's.
struct TilePFrags {
  uint32_t b0, b1, b0_t1, b1_t1;
};
// kHeadTiles 8-head tiles share the expanded values (the A operands): one MMA per tile against its own P^T.
template <int kHeadTiles, int kMTiles>
__device__ inline void MmaHeadTiles(float (&o_acc)[kHeadTiles][kMTiles][4], int m, uint32_t a0, uint32_t a1,
                                    uint32_t a2, uint32_t a3, const TilePFrags& pb) {
  MmaF16(o_acc[0][m], a0, a1, a2, a3, pb.b0, pb.b1);
  if constexpr (kHeadTiles == 2) MmaF16(o_acc[1][m], a0, a1, a2, a3, pb.b0_t1, pb.b1_t1);
}
template <KvFormat kFormat, int kHeadDim, int kHeadTiles, bool kPairedKv = false>
__device__ inline void TransposedValueTile(const uint8_t* v_stage, int valid, int g, int t, const Tq3Tables& tab,
                                           const TilePFrags pb, float (&o_acc)[kHeadTiles][kHeadDim / 16][4]) {
  using L = TileLayout<kFormat, kHeadDim, 1, false, kPairedKv>;
  if constexpr (kFormat != KvFormat::kTq3) {
    // FP8: the code bytes of two keys are interleaved first (prmt), so each hardware conversion yields a key pair
    // of one dim: registers m = 8 i + 2 j (dims VDim(g, m, 0 / 1) = 16 (8 i + g) + 4 j, + 1) and m + 1 (+ 2, + 3).
    const int keys[4] = {2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t};
    if constexpr (kHeadDim == 64) {
      // v16: thread g's 8 dims at byte 8 g (VDim): words j = 0, 1 give m-tiles 2 j, 2 j + 1 as above.
      uint2 w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        w[k] = *reinterpret_cast<const uint2*>(v_stage + min(keys[k], valid - 1) * L::kVStride + 8 * g);
      }
      const uint32_t wa[4][2] = {{w[0].x, w[0].y}, {w[1].x, w[1].y}, {w[2].x, w[2].y}, {w[3].x, w[3].y}};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t ab0, ab1, ab2, ab3, cd0, cd1, cd2, cd3;
        E4m3x4ToF16x2x2(Prmt(wa[0][j], wa[1][j], 0x5140u), ab0, ab1);
        E4m3x4ToF16x2x2(Prmt(wa[0][j], wa[1][j], 0x7362u), ab2, ab3);
        E4m3x4ToF16x2x2(Prmt(wa[2][j], wa[3][j], 0x5140u), cd0, cd1);
        E4m3x4ToF16x2x2(Prmt(wa[2][j], wa[3][j], 0x7362u), cd2, cd3);
        MmaHeadTiles(o_acc, 2 * j, ab0, ab1, cd0, cd1, pb);
        MmaHeadTiles(o_acc, 2 * j + 1, ab2, ab3, cd2, cd3, pb);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kHeadDim / 128; ++i) {
        uint4 w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = LoadU4(v_stage + min(keys[k], valid - 1) * L::kVStride + 16 * (8 * i + g));
        const uint32_t wa[4][4] = {{w[0].x, w[0].y, w[0].z, w[0].w}, {w[1].x, w[1].y, w[1].z, w[1].w},
                                   {w[2].x, w[2].y, w[2].z, w[2].w}, {w[3].x, w[3].y, w[3].z, w[3].w}};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t ab0, ab1, ab2, ab3, cd0, cd1, cd2, cd3;  // (key a, key b) of dims 4 j .. 4 j + 3; (c, d) likewise
          E4m3x4ToF16x2x2(Prmt(wa[0][j], wa[1][j], 0x5140u), ab0, ab1);
          E4m3x4ToF16x2x2(Prmt(wa[0][j], wa[1][j], 0x7362u), ab2, ab3);
          E4m3x4ToF16x2x2(Prmt(wa[2][j], wa[3][j], 0x5140u), cd0, cd1);
          E4m3x4ToF16x2x2(Prmt(wa[2][j], wa[3][j], 0x7362u), cd2, cd3);
          MmaHeadTiles(o_acc, 8 * i + 2 * j, ab0, ab1, cd0, cd1, pb);
          MmaHeadTiles(o_acc, 8 * i + 2 * j + 1, ab2, ab3, cd2, cd3, pb);
        }
      }
    }
    return;
  }
  // ---- values: keys 2t, 2t + 1 (a0, a1 of the A operand) and 8 + 2t, 9 + 2t (a2, a3); row g of an m-tile takes
  // the even coordinate of a selector byte pair, row g + 8 the odd one (Tq3PairSelectors; output dims: VDim).
  // d = 256: thread g takes group g (12 bytes at 12 g). d = 128: the 16-bit halves h = g & 1 of the three words of
  // group g / 2: nibbles 4 h .. 4 h + 3 of each word, i.e. the indices of coordinates 8 i + 4 h + n (i < 3, n < 4)
  // with the spill bits of 24 + 4 h + n, a complete set of 16 coordinates.
  const int keys[4] = {2 * t, 2 * t + 1, 8 + 2 * t, 9 + 2 * t};
  if constexpr (kHeadDim == 64) {
    // v16, head_dim 64: byte g & 3 of each word of group g / 4 = nibbles 2 (g & 3), 2 (g & 3) + 1: the indices of
    // coordinates 8 i + 2 (g & 3) + n (i < 3, n < 2) with the spill bits of 24 + 2 (g & 3) + n (8 coordinates). The
    // bytes of keys 2t | 8 + 2t and 2t + 1 | 9 + 2t share one word (bytes 0 | 1), so one pair-selector word serves
    // both key pairs: byte 0 of even[r] / odd[r] = pair (2t, 2t + 1), byte 1 = pair (8 + 2t, 9 + 2t) of coordinate
    // 8 r + 2 (g & 3) (+ 1 for odd); one Tq3Lookup4 gives both pairs. Not tuned (half of each word idles).
    const uint8_t* v_rows64 = v_stage + 12 * (g >> 2) + (g & 3);
    uint32_t w02[3];
    uint32_t w13[3];
#pragma unroll
    for (int word = 0; word < 3; ++word) {
      const uint32_t b0 = v_rows64[keys[0] * L::kVStride + 4 * word];
      const uint32_t b1 = v_rows64[keys[1] * L::kVStride + 4 * word];
      const uint32_t b2 = v_rows64[keys[2] * L::kVStride + 4 * word];
      const uint32_t b3 = v_rows64[keys[3] * L::kVStride + 4 * word];
      w02[word] = b0 | (b2 << 8);
      w13[word] = b1 | (b3 << 8);
    }
    uint32_t even[4];
    uint32_t odd[4];
    Tq3PairSelectors(w02, w13, even, odd);
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // m-tile r: coordinate 8 r + 2 (g & 3) (row g), + 1 (row g + 8)
      uint32_t ve[2], vo[2];  // [0]: key pair (2t, 2t + 1), [1]: (8 + 2t, 9 + 2t)
      Tq3Lookup4(even[r], tab, ve[0], ve[1]);
      Tq3Lookup4(odd[r], tab, vo[0], vo[1]);
      MmaHeadTiles(o_acc, r, ve[0], vo[0], ve[1], vo[1], pb);
    }
    return;
  }
  // (d = 256: group g; d = 128: group g / 2, half g & 1; kPairedKv: groups of the pair's second head one head run
  // further, L::GroupOffset.)
  const uint8_t* v_rows = v_stage + (kHeadDim == 256 ? L::GroupOffset(g) : L::GroupOffset(g >> 1) + 2 * (g & 1));
  uint32_t w[4][3];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // No clamp to the last valid key: the copy always stages all 16 rows of the tile (unused page slots included),
    // any TQ3 code decodes to a finite value, and a masked key's probability is exactly 0.
    const uint8_t* codes = v_rows + keys[i] * L::kVStride;
#pragma unroll
    for (int word = 0; word < 3; ++word) {
      w[i][word] = kHeadDim == 256 ? LoadU32(codes + 4 * word)
                                   : uint32_t(*reinterpret_cast<const uint16_t*>(codes + 4 * word));
    }
  }
  if constexpr (kHeadDim == 128) {
    // The half-words of keys 2t and 8 + 2t share one 32-bit word (low / high half), those of 2t + 1 and 9 + 2t
    // another (one integer multiply-add each, off the ALU pipe), so one pair-selector word serves both key pairs:
    // bytes 0-1 give pair (2t, 2t + 1), bytes 2-3 pair (8 + 2t, 9 + 2t) of the same two coordinates (v8: ~25
    // fewer integer ALU ops per tile than selectors per key pair).
    uint32_t w02[3];
    uint32_t w13[3];
#pragma unroll
    for (int word = 0; word < 3; ++word) {
      w02[word] = PackHalvesOnFmaPipe(w[0][word], w[2][word]);
      w13[word] = PackHalvesOnFmaPipe(w[1][word], w[3][word]);
    }
    uint32_t even[4];
    uint32_t odd[4];
    Tq3PairSelectors(w02, w13, even, odd);
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // m-tiles 2 r + h: coordinates 8 r + 4 (g & 1) + 2 h (row g), + 1 (row g + 8)
      uint32_t ve01[2], vo01[2], ve23[2], vo23[2];  // key pairs (2t, 2t + 1), (8 + 2t, 9 + 2t)
      Tq3Lookup4(even[r], tab, ve01[0], ve01[1]);
      Tq3Lookup4(odd[r], tab, vo01[0], vo01[1]);
      Tq3Lookup4(UpperSelectorHalf(even[r]), tab, ve23[0], ve23[1]);
      Tq3Lookup4(UpperSelectorHalf(odd[r]), tab, vo23[0], vo23[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) MmaHeadTiles(o_acc, 2 * r + h, ve01[h], vo01[h], ve23[h], vo23[h], pb);
    }
    return;
  }
  // v27: byte-interleaved selectors (Tq3BytePairSelectors); m-tile 4 r + q takes coordinates 8 r + 2 q (row g) and
  // + 1 (row g + 8), q = the 4-nibble quarter of lo[r] (q = 0, 1) or hi[r] (q = 2, 3): the same VDim as before.
  uint32_t lo01[4], hi01[4], lo23[4], hi23[4];
  Tq3BytePairSelectors(w[0], w[1], lo01, hi01);
  Tq3BytePairSelectors(w[2], w[3], lo23, hi23);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t sel01 = q < 2 ? lo01[r] : hi01[r];
      const uint32_t sel23 = q < 2 ? lo23[r] : hi23[r];
      uint32_t c01, c01_next, c23, c23_next;  // key pairs (2t, 2t + 1), (8 + 2t, 9 + 2t)
      Tq3LookupPairs(q & 1 ? UpperSelectorHalf(sel01) : sel01, tab, c01, c01_next);
      Tq3LookupPairs(q & 1 ? UpperSelectorHalf(sel23) : sel23, tab, c23, c23_next);
      MmaHeadTiles(o_acc, 4 * r + q, c01, c01_next, c23, c23_next, pb);
    }
  }
}

// kHeadTiles (v17): 8-head MMA tiles of the CTA's query rows (1, or 2 for query groups of 9-16 read once): the key /
// value expansion (the A operands) is shared, the score and value MMAs run once per tile against its B operand (query
// fragments, P^T), with per-tile accumulators, softmax state and combine rows. kHeadTiles = 1 is the v16 kernel.
template <KvFormat kFormat, int kHeadDim, int kHeadTiles, bool kWideCta = false, bool kPairedKv = false>
__global__ void __launch_bounds__(TileLayout<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>::kThreads,
                                  (TileLayout<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>::kCtasPerSm))
    DecodePartialTransposedKernel(DecodeParams p) {
  using L = TileLayout<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>;
  constexpr int kWarps = L::kWarps;  // 4, or all the SM's warps in a wide TQ3 CTA (v23)
  constexpr int kRows = kMaxGroup * kHeadTiles;  // query rows of the CTA (rows >= heads.rows are zero queries)
  // TQ3 software pipelining (v8): the value phase of a warp's previous unit runs after the score phase of its current
  // unit (independent instruction streams the scheduler can interleave); the copy into the freed stage is issued last.
  constexpr bool kPipeline = kFormat == KvFormat::kTq3;
  constexpr int kKBlockDims = KBlockDims<kHeadDim>();
  constexpr int kBlocks = kHeadDim / kKBlockDims;
  constexpr int kBlockSteps = kKBlockDims / 16;  // FP8 k-steps per block (8; 4 at head_dim 64)
  constexpr int kMTiles = kHeadDim / 16;
  constexpr int kTile = kCudaKeyTileTokens;
  constexpr int kChains = 2;  // FP8 score accumulators: query hi, lo
  constexpr int kSub = L::kSubTiles;
  extern __shared__ __align__(16) uint8_t smem[];
  uint4* q_frag = reinterpret_cast<uint4*>(smem);  // [tile][k-step][lane]: {hi b0, hi b1, lo b0, lo b1}
  uint8_t* stages_base = smem + L::kQFragBytes;
  // kImma: {q2, q1} digit fragments in q_frag's first half (k-steps of 32 dims), {q0} in the rest.
  constexpr int kDigitSteps = kHeadDim / 32;  // TQ3 score k-steps per head tile
  uint2* q_frag0 = reinterpret_cast<uint2*>(q_frag + kHeadTiles * kDigitSteps * kWarpSize);
  static_assert(kHeadTiles * kDigitSteps * kWarpSize * 24 <= L::kQFragBytes,
                "digit fragments fit the fp16 fragment area");

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int g = lane >> 2;  // key rows g, 8 + g (scores); dim rows (values)
  const int t = lane & 3;   // heads 2t, 2t + 1 (scores, output columns)
  MINIMAKV_TIMELINE_ENTRY(int(kFormat));
  const HeadTile heads = kPairedKv ? PairedHeadTile(p) : CtaHeadTile(p);
  const int kv_head = heads.kv_head;
  const CudaWorkItem item = p.items[blockIdx.x];
  if (!TriggerAfterLoop(p)) AllowDependentLaunch();
  // The tables are read back from shared memory, one copy per lane, so that the compiler keeps them in ordinary
  // registers: as known constants (or warp-uniform values) it parks them in uniform registers and copies one
  // back before nearly every prmt (~65 extra instructions per tile in the SASS).
  __shared__ Tq3Tables shared_tables[kWarpSize];
  if (threadIdx.x < kWarpSize) shared_tables[threadIdx.x] = MakeTq3Tables();
  constexpr bool kImma = kFormat == KvFormat::kTq3;  // TQ3 scores on the integer tensor cores (v9)
  // v9: softmax without reductions while scores stay near the max (TQ3); v18: also FP8 at d = 64 and with two head
  // tiles, whose loops spend the most instructions per byte (the shuffle max of 2 x kHeadTiles heads per unit).
  constexpr bool kLazyMax = kFormat == KvFormat::kTq3 || (kLazyFp8 && (kHeadTiles == 2 || kHeadDim == 64));
  __shared__ Tq3DigitTables shared_digits[kImma ? kWarpSize : 1];
  __shared__ float q_amax[kRows];
  __shared__ __align__(16) float q_rows[kImma ? kRows * kHeadDim : 1];  // the CTA's rotated query rows
  if (kImma && threadIdx.x < kWarpSize) shared_digits[threadIdx.x] = MakeTq3DigitTables();

  const int page_tokens = p.layout.page_tokens;
  const int tiles_per_page = page_tokens / kTile;
  const int num_pages = item.page_end - item.page_begin;
  const int num_tiles = (num_pages - 1) * tiles_per_page + (item.last_tokens + kTile - 1) / kTile;
  const int last_tile_valid = item.last_tokens - kTile * ((item.last_tokens - 1) / kTile);  // in [1, kTile]
  const size_t page_bytes = p.layout.page_bytes();
  const int vectors = p.layout.kv_heads * page_tokens;
  const int v_codes_section = vectors * L::kPageCodeBytes;
  const int scales_section = 2 * v_codes_section;
  const int v_scales_section = vectors * 2;
  const int head_row = kv_head * page_tokens;
  uint8_t* my_stages = stages_base + warp * L::kWarpStagesBytes;
  const uint32_t my_stages_addr = uint32_t(__cvta_generic_to_shared(my_stages));
  auto k_rows_of = [&](int stage) { return my_stages + stage * L::kStageBytes; };  // K rows at kKOffset = 0
  auto v_rows_of = [&](int stage) { return my_stages + L::kVOffset + stage * L::kStageBytes; };

  // A warp's tiles are warp, warp + kWarps, ...; tile -> (page of the item, tile in that page) by a multiply-high with
  // ceil(2^32 / tiles_per_page), exact while tile * tiles_per_page < 2^32 (tiles < 2^20, tiles_per_page <= 4096).
  const uint32_t page_magic = 0xFFFFFFFFu / uint32_t(tiles_per_page) + 1u;
  auto page_of = [&](int tile) { return tiles_per_page == 1 ? tile : int(__umulhi(uint32_t(tile), page_magic)); };
  // Copies of tile (of the item) from page page_id into stage: 16-byte cp.async by every lane (the caller commits
  // one group per tile).
  // TQ3 (cp.async): the lane's parts of the copy addresses that do not change from tile to tile (lanes 0-3 also
  // copy the scales: 0-1 K, 2-3 V), so a tile's copies cost a few adds (v10: the loop's copy and bookkeeping
  // section ~95 -> ~72 instructions at d = 256; ptxas still re-derives some lane values under register pressure).
  const uint32_t lane_dst = my_stages_addr + 16 * lane;
  const uint32_t lane_k_src = uint32_t(head_row * L::kPageCodeBytes + 16 * lane);
  // kPairedKv: the second head's code runs start page_tokens vectors after the first's (its scale runs likewise:
  // scale_head * page_tokens below).
  const int pair_codes = kPairedKv ? page_tokens * L::kPageCodeBytes : 0;
  // Scale runs of a tile (32 bytes each): K then V, per head of the pair (kPairedKv: K a, K b, V a, V b).
  const bool scale_lane = lane < 4 * L::kPagedHeads;
  const int scale_run = lane >> 1;
  const bool scale_lane_v = scale_run >= L::kPagedHeads;
  const int scale_head = kPairedKv ? scale_run - (scale_lane_v ? L::kPagedHeads : 0) : 0;  // 1: the pair's second
  const uint32_t lane_scale_src = uint32_t(scales_section + (scale_lane_v ? v_scales_section : 0) +
                                           (head_row + scale_head * page_tokens) * L::kScaleBytes + 16 * (lane & 1));
  const uint32_t lane_scale_dst = my_stages_addr + (scale_lane_v ? L::kVScaleOffset : L::kKScaleOffset) +
                                  scale_head * L::kHeadScaleRun + 16 * (lane & 1);
  const uint32_t page_bytes32 = uint32_t(page_bytes);
  // Copies of a tile into stage; sub = the 16-key row block of the stage (TQ3 pair tiles: 0 or 1).
  auto issue_tile_copies = [&](int stage, int page_id, int tile, int sub) {
    const int tok0 = kTile * (tile - page_of(tile) * tiles_per_page);
    if constexpr (kFormat == KvFormat::kTq3) {
      const uint8_t* page32 = p.pages + uint64_t(uint32_t(page_id)) * page_bytes32;  // page_bytes < 2^32 (plan)
      const uint8_t* k_lane = page32 + (lane_k_src + uint32_t(tok0 * L::kPageCodeBytes));
      const uint32_t sub_offset = uint32_t(sub * kTile * L::kKStride);
      const uint32_t stage_offset = uint32_t(stage * L::kStageBytes);
      IssueTq3TileLane<L>(lane_dst + stage_offset + sub_offset, k_lane, k_lane + v_codes_section, lane);
      if constexpr (kPairedKv) {  // the second head's K and V rows, one head run further in the stage
        IssueTq3TileLane<L>(lane_dst + stage_offset + sub_offset + L::kHeadRunBytes, k_lane + pair_codes,
                            k_lane + pair_codes + v_codes_section, lane);
      }
      if (scale_lane) {
        CpAsync16(lane_scale_dst + stage_offset + uint32_t(sub * kTile * L::kScaleBytes),
                  page32 + (lane_scale_src + uint32_t(tok0 * L::kScaleBytes)));
      }
    } else {
      static_assert(kSub == 1, "FP8: 16-key tiles");  // into padded rows
      const uint8_t* page = p.pages + size_t(page_id) * page_bytes;
      IssueTile<kFormat, kHeadDim>(my_stages + stage * L::kStageBytes, page, p.layout, kv_head, tok0, lane);
    }
  };
  // The loop walks units of kSub 16-key tiles (tiles unit * kSub + sub); a warp's units are warp, warp + kWarps, ...
  const int num_units = kSub == 1 ? num_tiles : (num_tiles + kSub - 1) / kSub;
  int issue_tile = warp;  // the next unit to copy
  const int32_t* item_page_ids = p.page_ids + item.page_begin;
  // Page ids of a unit's tiles (0 past the item's last tile, not copied). With an even number of tiles per page
  // both tiles of a pair lie in one page.
  // (ids[sub] of such a second tile is not loaded: the copy takes ids[0]. v11 copied ids[0] into ids[1] right after
  // the load, which made the warp wait for the load there: 3.3% of the stall samples, ncu source counters.)
  const bool pair_in_page = kSub >= 2 && tiles_per_page % kSub == 0;  // all kSub tiles of a unit in one page
  auto unit_page_ids = [&](int unit, int (&ids)[kSub]) {
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      const int tile = unit * kSub + sub;
      ids[sub] = tile < num_tiles && !(sub > 0 && pair_in_page) ? item_page_ids[page_of(tile)] : 0;
    }
  };
  // v12 regular pair copies: with tiles_per_page dividing the kSub * kWarps tiles a warp advances per unit (8 with
  // 4 warps, 32 wide), a warp's unit u = warp + kWarps j starts at tile 2 warp mod tiles_per_page of its page in
  // every iteration, and its two tiles lie in one page, so a full unit is four contiguous runs: 32 K rows, 32 V rows
  // (kUnitChunks 16-byte chunks each), 32 K scales and 32 V scales (64 bytes each, lanes 0-3 and 4-7), all at per-lane offsets
  // computed here once; a unit's copies cost one page base and a few adds.
  constexpr int kUnitChunks = kSub * kTile * L::kPageCodeBytes / 16;  // per head
  // (v16: head_dim 64's 48-chunk runs are no whole rounds of the warp: always the per-tile copies.)
  const bool regular_units = kFormat == KvFormat::kTq3 && kUnitChunks % kWarpSize == 0 && pair_in_page &&
                             (kSub * kWarps) % tiles_per_page == 0;
  const int warp_tok0 = kTile * ((kSub * warp) % tiles_per_page);
  const uint32_t unit_k_src = lane_k_src + uint32_t(warp_tok0 * L::kPageCodeBytes);
  // Scale runs of a unit, 4 chunks each: K then V (kPairedKv: K a, K b, V a, V b; lanes 0-7, or 0-15 paired).
  constexpr int kUnitScaleChunks = kSub * kTile * L::kScaleBytes / 16;  // per run: 4 (pairs)
  const bool unit_scale_lane = lane < 2 * L::kPagedHeads * kUnitScaleChunks;
  const int unit_scale_run = lane / kUnitScaleChunks;
  const bool unit_scale_v = unit_scale_run >= L::kPagedHeads;
  const int unit_scale_head = kPairedKv ? unit_scale_run - (unit_scale_v ? L::kPagedHeads : 0) : 0;
  const int unit_scale_chunk = lane % kUnitScaleChunks;
  const uint32_t unit_scale_src =
      uint32_t(scales_section + (unit_scale_v ? v_scales_section : 0) +
               (head_row + unit_scale_head * page_tokens + warp_tok0) * L::kScaleBytes + 16 * unit_scale_chunk);
  const uint32_t unit_scale_dst = my_stages_addr + 16 * unit_scale_chunk + unit_scale_head * L::kHeadScaleRun +
                                  uint32_t(unit_scale_v ? L::kVScaleOffset : L::kKScaleOffset);
  auto issue_regular_unit = [&](int stage, int page_id) {
    const uint8_t* page32 = p.pages + uint64_t(uint32_t(page_id)) * page_bytes32;  // page_bytes < 2^32 (plan)
    const uint8_t* k_src = page32 + unit_k_src;
    const uint32_t stage_offset = uint32_t(stage * L::kStageBytes);
    if constexpr (kSub >= 2 && kUnitChunks % kWarpSize == 0) {  // (a multiple of 32 only for pairs, d >= 128)
      CopyRunLane<kUnitChunks, 0>(lane_dst + stage_offset, k_src);
      CopyRunLane<kUnitChunks, L::kVOffset>(lane_dst + stage_offset, k_src + v_codes_section);
      if constexpr (kPairedKv) {
        CopyRunLane<kUnitChunks, L::kHeadRunBytes>(lane_dst + stage_offset, k_src + pair_codes);
        CopyRunLane<kUnitChunks, L::kVOffset + L::kHeadRunBytes>(lane_dst + stage_offset,
                                                                  k_src + pair_codes + v_codes_section);
      }
    }
    // v12: the scale copies (lanes 0-7) as one predicated cp.async instead of a branch around it.
    CpAsync16If(unit_scale_lane, unit_scale_dst + stage_offset, page32 + unit_scale_src);
  };
  auto issue_unit = [&](int stage, const int (&ids)[kSub], int unit) {
    if (regular_units && unit * kSub + kSub - 1 < num_tiles) {  // warp-uniform
      issue_regular_unit(stage, ids[0]);
      return;
    }
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      const int tile = unit * kSub + sub;
      if (tile < num_tiles) issue_tile_copies(stage, sub > 0 && pair_in_page ? ids[0] : ids[sub], tile, sub);
    }
  };
  // v25: the global loads of the prologue go out before its copies: the TQ3 query rows (LoadTq3QueryRows) and the
  // page ids of the first kStages - 1 units (v12-v24 loaded each unit's ids just before its copies, one dependent
  // round trip per stage, and the query after all copies). None of them is written by the step's other kernels, so
  // no CTA waits for the previous kernel before its loop (v26: only the order keeper waits, before it exits).
  Tq3QueryRows<kHeadDim, kHeadTiles, kWarps> query_rows;
  QueryFragmentInputs<kHeadDim, kHeadTiles> query_inputs;  // FP8
  if constexpr (kImma) {
    LoadTq3QueryRows<kHeadDim, kHeadTiles, kWarps, kPairedKv>(p, item, heads, query_rows);
  } else {
    LoadQueryFragmentInputs<kFormat, kHeadDim, kHeadTiles>(p, item, heads, query_inputs);
  }
  int first_ids[L::kStages - 1][kSub];
#pragma unroll
  for (int s = 0; s < L::kStages - 1; ++s) unit_page_ids(issue_tile + kWarps * s, first_ids[s]);
#pragma unroll
  for (int s = 0; s < L::kStages - 1; ++s) {
    issue_unit(s, first_ids[s], issue_tile);
    CpAsyncCommit();
    issue_tile += kWarps;
  }
  if constexpr (kImma) {
    BuildTq3DigitFragments<kHeadDim, kHeadTiles, kWarps, kPairedKv>(p, heads, query_rows, q_frag, q_frag0, q_amax,
                                                                     q_rows);
  } else {
    BuildQueryFragments<kFormat, kHeadDim, kHeadTiles>(p, query_inputs, q_frag);
  }
  __syncthreads();
  MINIMAKV_TIMELINE_STAMP_CLOCK(int(kFormat), ready_ns, ready_clk);
  const Tq3Tables tab = shared_tables[lane];
  const Tq3DigitTables digits = shared_digits[kImma ? lane : 0];
  // Integer scores -> base-2 logits before the key scale: heads 2t, 2t + 1 (rows >= group hold zero queries).
  // Per head tile ht: heads 8 ht + 2t, 8 ht + 2t + 1 of the CTA's rows. (Here and in the TQ3 score MMAs, the
  // lazy softmax step, the O rescale and the pipelined P^T, tile 1's code sits in `if constexpr` next to tile 0's
  // instead of in a loop over tiles: a loop of one trip, even unrolled, renumbered / reordered registers in the
  // TQ3 kernels' PTX; this way kHeadTiles = 1 compiles to exactly the v16 PTX, docs/cuda-notes.md v17.)
  float score_unit[kHeadTiles][2] = {{0.0f, 0.0f}};
  if constexpr (kImma) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      score_unit[0][hh] = q_amax[2 * t + hh] * (1.0f / float(kTq3QueryFixedMax)) *
                          kTq3InvUnitsPerMagnitude;  // 1 / alpha folded in (units = alpha * magnitudes, tq3_codec.h)
      if constexpr (kHeadTiles == 2) {
        score_unit[1][hh] = q_amax[kMaxGroup + 2 * t + hh] * (1.0f / float(kTq3QueryFixedMax)) *
                            kTq3InvUnitsPerMagnitude;
      }
    }
  }

  // heads 2t, 2t + 1 of each tile: running max (uniform over g), sum of this thread's keys (reduced over g at the end)
  float row_max[kHeadTiles][2] = {{-INFINITY, -INFINITY}};
  if constexpr (kHeadTiles == 2) row_max[1][0] = row_max[1][1] = -INFINITY;
  float row_sum[kHeadTiles][2] = {{0.0f, 0.0f}};
  float v_unit = 0.0f;  // o_acc holds O / v_unit (keeps the folded V scales in fp16 range)
  float inv_v_unit = 0.0f;
  float o_acc[kHeadTiles][kMTiles][4];
#pragma unroll
  for (int ht = 0; ht < kHeadTiles; ++ht) {
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) o_acc[ht][m][0] = o_acc[ht][m][1] = o_acc[ht][m][2] = o_acc[ht][m][3] = 0.0f;
  }

  // The page id of the next tile to copy is loaded one iteration early (its latency off the critical path).
  // Regular units: the page index of a warp's next unit advances by a constant (kSub * kWarps / tiles_per_page
  // pages per iteration), so the prefetch is one guarded load (v12; else page_of with a multiply-high per tile).
  const int page_step = regular_units ? kSub * kWarps / tiles_per_page : 0;
  int next_page_index = regular_units ? kSub * issue_tile / tiles_per_page : 0;
  auto prefetch_page_ids = [&](int unit, int (&ids)[kSub]) {
    if (regular_units) {  // warp-uniform
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) ids[sub] = 0;  // (a unit's tiles share one page)
      if (kSub * unit < num_tiles) ids[0] = item_page_ids[next_page_index];
    } else {
      unit_page_ids(unit, ids);
    }
  };
  int next_page_id[kSub];
  prefetch_page_ids(issue_tile, next_page_id);
  // Ring positions: read_stage = the stage of the unit to compute, write_stage = that of the next copy.
  int read_stage = 0;
  int write_stage = L::kStages - 1;
  auto issue_next = [&]() {  // unit issue_tile into the stage freed by this iteration
    issue_unit(write_stage, next_page_id, issue_tile);
    CpAsyncCommit();
    issue_tile += kWarps;
    next_page_index += page_step;
    prefetch_page_ids(issue_tile, next_page_id);
    write_stage = write_stage + 1 == L::kStages ? 0 : write_stage + 1;
  };
  // Pipelined: the previous tile's stage, valid keys and P^T fragments. The first iteration's value phase reads the
  // current (loaded) stage with zero probabilities: it adds exact zeros (expanded codes are finite).
  int prev_stage = 0;
  int prev_valid[kSub];
  uint32_t prev_pb0[kSub];
  uint32_t prev_pb1[kSub];
  uint32_t prev_pb0_t1[kSub];  // head tile 1 (kHeadTiles = 2)
  uint32_t prev_pb1_t1[kSub];
#pragma unroll
  for (int sub = 0; sub < kSub; ++sub) {
    prev_valid[sub] = 1;
    prev_pb0[sub] = 0u;
    prev_pb1[sub] = 0u;
    if constexpr (kHeadTiles == 2) prev_pb0_t1[sub] = prev_pb1_t1[sub] = 0u;
  }
  auto prev_frags = [&](int sub) {
    if constexpr (kHeadTiles == 2) {
      return TilePFrags{prev_pb0[sub], prev_pb1[sub], prev_pb0_t1[sub], prev_pb1_t1[sub]};
    } else {
      return TilePFrags{prev_pb0[sub], prev_pb1[sub], 0u, 0u};
    }
  };
  for (int unit = warp; unit < num_units; unit += kWarps) {
    if constexpr (!kPipeline) issue_next();
    // Pipelined: units up to this one + kStages - 2 are committed (the last copy was issued at the end of the
    // previous iteration), so kStages - 2 groups may stay pending.
    CpAsyncWait<kPipeline ? L::kStages - 2 : L::kStages - 1>();
    __syncwarp();
    const int cur_stage = read_stage;
    const uint8_t* k_stage = k_rows_of(cur_stage);
    const uint8_t* v_stage = v_rows_of(cur_stage);
    read_stage = read_stage + 1 == L::kStages ? 0 : read_stage + 1;

    // sc[ht][sub][kk][hh]: key (kk ? 8 + g : g) of row block sub, head 8 ht + 2t + hh.
    float sc[kHeadTiles][kSub][2][2];
    bool key_valid[kSub][2];
    float v_scale[kSub][2];
    int valid[kSub];
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      // Every tile is full but the item's last one (pages before the last are full, and so are the tiles of the
      // last page before its last tile); a pair's second tile past the item's end has no valid key.
      const int tile = unit * kSub + sub;
      valid[sub] = kSub == 1 ? (tile == num_tiles - 1 ? last_tile_valid : kTile)
                             : (tile < num_tiles - 1 ? kTile : tile == num_tiles - 1 ? last_tile_valid : 0);
      const uint8_t* block_stage = k_stage + sub * kTile * L::kKStride;  // row block sub's K rows

      // ---- scores S^T: rows = keys g (a) and 8 + g (b), masked keys read the last valid one; columns = heads.
      float acc[kHeadTiles][kChains][4];
#pragma unroll
      for (int c = 0; c < kChains; ++c) {
        acc[0][c][0] = acc[0][c][1] = acc[0][c][2] = acc[0][c][3] = 0.0f;
        if constexpr (kHeadTiles == 2) acc[1][c][0] = acc[1][c][1] = acc[1][c][2] = acc[1][c][3] = 0.0f;
      }
      int iacc[kHeadTiles][3][4];  // integer scores (kImma): S2, S1, S0
#pragma unroll
      for (int c = 0; c < 3; ++c) {
        iacc[0][c][0] = iacc[0][c][1] = iacc[0][c][2] = iacc[0][c][3] = 0;
        if constexpr (kHeadTiles == 2) iacc[1][c][0] = iacc[1][c][1] = iacc[1][c][2] = iacc[1][c][3] = 0;
      }
      // Rows of masked keys: FP8 reads the last valid one (a staged unused slot may hold NaN codes); TQ3 reads the
      // staged row itself (any code decodes to a finite value; its score is masked and its V scale zeroed below;
      // a pair's second block past the item's end holds stale or never-written codes, equally finite).
      const int key_a = kImma ? g : min(g, valid[sub] - 1);
      const int key_b = kImma ? 8 + g : min(8 + g, valid[sub] - 1);
      const uint8_t* row_a = block_stage + L::kKOffset + key_a * L::kKStride;
      const uint8_t* row_b = block_stage + L::kKOffset + key_b * L::kKStride;
      if constexpr (kImma && kHeadDim == 64) {
        // v16, head_dim 64: two 32-coordinate groups, 2 k-steps; thread t takes group t / 2, selector words
        // 2 (t & 1) + r of it in k-step r (t & 1 = 1: W2 and the spill word), as BuildTq3DigitFragments orders the
        // query digits. The selects pick per lane (not tuned: d = 64 reads few bytes per key).
        const uint8_t* ga = row_a + (t >> 1) * 12;
        const uint8_t* gb = row_b + (t >> 1) * 12;
        const uint32_t wa[3] = {LoadU32(ga), LoadU32(ga + 4), LoadU32(ga + 8)};
        const uint32_t wb[3] = {LoadU32(gb), LoadU32(gb + 4), LoadU32(gb + 8)};
        const bool upper = (t & 1) != 0;
        const uint32_t sel_a[2] = {upper ? wa[2] & kTq3IndexNibbles : wa[0] & kTq3IndexNibbles,
                                   upper ? Tq3SpillSelectors(wa[0], wa[1], wa[2]) : wa[1] & kTq3IndexNibbles};
        const uint32_t sel_b[2] = {upper ? wb[2] & kTq3IndexNibbles : wb[0] & kTq3IndexNibbles,
                                   upper ? Tq3SpillSelectors(wb[0], wb[1], wb[2]) : wb[1] & kTq3IndexNibbles};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint4 qf = q_frag[r * kWarpSize + lane];    // q2, q1
          const uint2 qf0 = q_frag0[r * kWarpSize + lane];  // q0
          uint4 qf_t1;  // head tile 1 (kHeadTiles = 2)
          uint2 qf0_t1;
          if constexpr (kHeadTiles == 2) {
            qf_t1 = q_frag[(kDigitSteps + r) * kWarpSize + lane];
            qf0_t1 = q_frag0[(kDigitSteps + r) * kWarpSize + lane];
          }
          const uint32_t k0 = Prmt(digits.pos, digits.neg, sel_a[r]);
          const uint32_t k1 = Prmt(digits.pos, digits.neg, sel_b[r]);
          const uint32_t k2 = Prmt(digits.pos, digits.neg, UpperSelectorHalf(sel_a[r]));
          const uint32_t k3 = Prmt(digits.pos, digits.neg, UpperSelectorHalf(sel_b[r]));
          MmaS8(iacc[0][0], k0, k1, k2, k3, qf.x, qf.y);
          MmaS8(iacc[0][1], k0, k1, k2, k3, qf.z, qf.w);
          MmaS8(iacc[0][2], k0, k1, k2, k3, qf0.x, qf0.y);
          if constexpr (kHeadTiles == 2) {
            MmaS8(iacc[1][0], k0, k1, k2, k3, qf_t1.x, qf_t1.y);
            MmaS8(iacc[1][1], k0, k1, k2, k3, qf_t1.z, qf_t1.w);
            MmaS8(iacc[1][2], k0, k1, k2, k3, qf0_t1.x, qf0_t1.y);
          }
        }
      } else if constexpr (kImma) {
#pragma unroll
        for (int block = 0; block < kBlocks; ++block) {
          const uint8_t* ga = row_a + L::GroupOffset(4 * block + t);  // group 4 block + t: words W0, W1, W2
          const uint8_t* gb = row_b + L::GroupOffset(4 * block + t);
          const uint32_t wa[3] = {LoadU32(ga), LoadU32(ga + 4), LoadU32(ga + 8)};
          const uint32_t wb[3] = {LoadU32(gb), LoadU32(gb + 4), LoadU32(gb + 8)};
#pragma unroll
          for (int r = 0; r < 4; ++r) {  // k-step 4 block + r: coordinates 8 r + e (a0, a1), 8 r + 4 + e (a2, a3)
            const uint32_t na = r < 3 ? wa[r] & kTq3IndexNibbles : Tq3SpillSelectors(wa[0], wa[1], wa[2]);
            const uint32_t nb = r < 3 ? wb[r] & kTq3IndexNibbles : Tq3SpillSelectors(wb[0], wb[1], wb[2]);
            const uint32_t na_up = UpperSelectorHalf(na);
            const uint32_t nb_up = UpperSelectorHalf(nb);
            const uint4 qf = q_frag[(block * 4 + r) * kWarpSize + lane];     // q2, q1
            const uint2 qf0 = q_frag0[(block * 4 + r) * kWarpSize + lane];   // q0
            uint4 qf_t1;  // head tile 1 (kHeadTiles = 2)
            uint2 qf0_t1;
            if constexpr (kHeadTiles == 2) {
              qf_t1 = q_frag[(kDigitSteps + block * 4 + r) * kWarpSize + lane];
              qf0_t1 = q_frag0[(kDigitSteps + block * 4 + r) * kWarpSize + lane];
            }
            const uint32_t k0 = Prmt(digits.pos, digits.neg, na);  // signed int8 units of 4 codes
            const uint32_t k1 = Prmt(digits.pos, digits.neg, nb);
            const uint32_t k2 = Prmt(digits.pos, digits.neg, na_up);
            const uint32_t k3 = Prmt(digits.pos, digits.neg, nb_up);
            MmaS8(iacc[0][0], k0, k1, k2, k3, qf.x, qf.y);    // unit x q2
            MmaS8(iacc[0][1], k0, k1, k2, k3, qf.z, qf.w);    // unit x q1
            MmaS8(iacc[0][2], k0, k1, k2, k3, qf0.x, qf0.y);  // unit x q0
            if constexpr (kHeadTiles == 2) {  // the expanded keys serve the second head tile too
              MmaS8(iacc[1][0], k0, k1, k2, k3, qf_t1.x, qf_t1.y);
              MmaS8(iacc[1][1], k0, k1, k2, k3, qf_t1.z, qf_t1.w);
              MmaS8(iacc[1][2], k0, k1, k2, k3, qf0_t1.x, qf0_t1.y);
            }
          }
        }
      } else {  // FP8: one 128-dim block of both keys at a time (LoadExpandK's register order = the query's KDim)
#pragma unroll
        for (int block = 0; block < kBlocks; ++block) {
          uint32_t ka[16];
          uint32_t kb[16];
          LoadExpandK<kFormat, kKBlockDims>(row_a, block, t, ka);
          LoadExpandK<kFormat, kKBlockDims>(row_b, block, t, kb);
#pragma unroll
          for (int jj = 0; jj < kBlockSteps; ++jj) {
            const int kstep = block * 8 + jj;  // (block > 0 only with 8 k-steps per block)
#pragma unroll
            for (int ht = 0; ht < kHeadTiles; ++ht) {
              const uint4 qf = q_frag[(ht * kMTiles + kstep) * kWarpSize + lane];
              MmaF16(acc[ht][0], ka[2 * jj], kb[2 * jj], ka[2 * jj + 1], kb[2 * jj + 1], qf.x, qf.y);
              MmaF16(acc[ht][1], ka[2 * jj], kb[2 * jj], ka[2 * jj + 1], kb[2 * jj + 1], qf.z, qf.w);
            }
          }
        }
      }
      if constexpr (kPipeline) {  // the previous unit's values of block sub (independent of this unit's scores)
        TransposedValueTile<kFormat, kHeadDim, kHeadTiles, kPairedKv>(v_rows_of(prev_stage) + sub * kTile * L::kVStride,
                                                           prev_valid[sub], g, t, tab, prev_frags(sub), o_acc);
      }
      // TQ3: the scales as stored (kTq3InvUnitsPerMagnitude is folded into score_unit and into the final v_unit).
      key_valid[sub][0] = g < valid[sub];
      key_valid[sub][1] = 8 + g < valid[sub];
      float k_scale[2];
      if constexpr (kImma) {
        // (kPairedKv: heads 2t, 2t + 1 belong to the pair's second KV head when t >= 2, whose scale runs follow.)
        const int scale_head_offset = kPairedKv && t >= 2 ? L::kHeadScaleRun / 2 : 0;  // in halves
        const __half* k_scales =
            reinterpret_cast<const __half*>(k_stage + L::kKScaleOffset) + scale_head_offset + sub * kTile;
        const __half* v_scales = reinterpret_cast<const __half*>(v_stage + L::kVScaleOffset - L::kVOffset) +
                                 scale_head_offset + sub * kTile;
        k_scale[0] = __half2float(k_scales[key_a]);
        k_scale[1] = __half2float(k_scales[key_b]);
        v_scale[sub][0] = key_valid[sub][0] ? __half2float(v_scales[key_a]) : 0.0f;  // unused slot: maybe NaN
        v_scale[sub][1] = key_valid[sub][1] ? __half2float(v_scales[key_b]) : 0.0f;
      } else {
        k_scale[0] = StagedFp8Scale(k_stage + L::kKScaleOffset, key_a);
        k_scale[1] = StagedFp8Scale(k_stage + L::kKScaleOffset, key_b);
        v_scale[sub][0] = StagedFp8Scale(v_stage + L::kVScaleOffset - L::kVOffset, key_a);
        v_scale[sub][1] = StagedFp8Scale(v_stage + L::kVScaleOffset - L::kVOffset, key_b);
      }
      if constexpr (kImma) {
        // 2^16 S2 + (2^8 S1 + S0): |S1|, |S0| <= 114 x 128 x 256 at d = 256, so 2^8 S1 + S0 stays below 2^30 in
        // int32; S2 (< 2^22) converts exactly, the sum rounds once in fp32 (one fma: 2^16 S2 is exact). v12: times
        // one per-(key, head) product score_unit * k_scale.
#pragma unroll
        for (int ht = 0; ht < kHeadTiles; ++ht) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int kk = i >> 1;
            const int hh = i & 1;
            const int low = iacc[ht][1][i] * kTq3DigitBase + iacc[ht][2][i];
            const float sum = __fmaf_rn(float(iacc[ht][0][i]), float(kTq3DigitBase * kTq3DigitBase), float(low));
            sc[ht][sub][kk][hh] = key_valid[sub][kk] ? sum * (score_unit[ht][hh] * k_scale[kk]) : -INFINITY;
          }
        }
      } else {
#pragma unroll
        for (int ht = 0; ht < kHeadTiles; ++ht) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int kk = i >> 1;
            const int hh = i & 1;
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < kChains; ++c) sum += acc[ht][c][i];
            sc[ht][sub][kk][hh] = key_valid[sub][kk] ? sum * k_scale[kk] : -INFINITY;
          }
        }
      }
    }
    float prob[kHeadTiles][kSub][2][2];
    // Lazy update (kLazyMax, TQ3): while no score of the unit lies more than kLazyMaxMargin above the running max
    // of its head and no V scale exceeds the largest one seen (v_unit * kProbScale), the unit is taken against the
    // current max and unit: no shuffle reductions, no exp2 of the max change, no rescale check. Probabilities are
    // then at most 2^kLazyMaxMargin, and the fp16 P^T entries at most 2^(14 + margin) < 65504. A unit that does not
    // fit (the first one always: the max starts at -inf) takes the full update below.
    bool full_update = true;
    if constexpr (kLazyMax) {
      const float v_max_seen = v_unit * kProbScale;  // exact: kProbScale is a power of two
      bool fits = true;
      static_assert(kHeadTiles == 1 || kHeadTiles == 2, "one or two head tiles");
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) {
        // (One expression, tile 1's terms constant-folded away for one tile: the v16 code for kHeadTiles = 1.)
        constexpr int kLast = kHeadTiles - 1;
        fits = fits && sc[0][sub][0][0] <= row_max[0][0] + kLazyMaxMargin &&
               sc[0][sub][1][0] <= row_max[0][0] + kLazyMaxMargin &&
               sc[0][sub][0][1] <= row_max[0][1] + kLazyMaxMargin &&
               sc[0][sub][1][1] <= row_max[0][1] + kLazyMaxMargin &&
               (kHeadTiles == 1 || (sc[kLast][sub][0][0] <= row_max[kLast][0] + kLazyMaxMargin &&
                                    sc[kLast][sub][1][0] <= row_max[kLast][0] + kLazyMaxMargin &&
                                    sc[kLast][sub][0][1] <= row_max[kLast][1] + kLazyMaxMargin &&
                                    sc[kLast][sub][1][1] <= row_max[kLast][1] + kLazyMaxMargin)) &&
               v_scale[sub][0] <= v_max_seen && v_scale[sub][1] <= v_max_seen;
      }
      full_update = __any_sync(kFullWarpMask, !fits);
    }
    if (!full_update) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
        for (int sub = 0; sub < kSub; ++sub) {
          prob[0][sub][0][hh] = Exp2Approx(sc[0][sub][0][hh] - row_max[0][hh]);
          prob[0][sub][1][hh] = Exp2Approx(sc[0][sub][1][hh] - row_max[0][hh]);
          row_sum[0][hh] += prob[0][sub][0][hh] + prob[0][sub][1][hh];
          if constexpr (kHeadTiles == 2) {
            prob[1][sub][0][hh] = Exp2Approx(sc[1][sub][0][hh] - row_max[1][hh]);
            prob[1][sub][1][hh] = Exp2Approx(sc[1][sub][1][hh] - row_max[1][hh]);
            row_sum[1][hh] += prob[1][sub][0][hh] + prob[1][sub][1][hh];
          }
        }
      }
    } else {
      float alpha[kHeadTiles][2];
#pragma unroll
      for (int ht = 0; ht < kHeadTiles; ++ht) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          float tile_max = fmaxf(sc[ht][0][0][hh], sc[ht][0][1][hh]);
#pragma unroll
          for (int sub = 1; sub < kSub; ++sub) {
            tile_max = fmaxf(tile_max, fmaxf(sc[ht][sub][0][hh], sc[ht][sub][1][hh]));
          }
#pragma unroll
          for (int offset = 4; offset < kWarpSize; offset *= 2) {  // over the 8 key-row groups
            tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, offset));
          }
          const float new_max = fmaxf(row_max[ht][hh], tile_max);  // finite: key 0 of a unit is always valid
          alpha[ht][hh] = Exp2Approx(row_max[ht][hh] - new_max);
          row_max[ht][hh] = new_max;
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub) {
            prob[ht][sub][0][hh] = Exp2Approx(sc[ht][sub][0][hh] - new_max);
            prob[ht][sub][1][hh] = Exp2Approx(sc[ht][sub][1][hh] - new_max);
          }
          float unit_sum = prob[ht][0][0][hh] + prob[ht][0][1][hh];
#pragma unroll
          for (int sub = 1; sub < kSub; ++sub) unit_sum += prob[ht][sub][0][hh] + prob[ht][sub][1][hh];
          row_sum[ht][hh] = row_sum[ht][hh] * alpha[ht][hh] + unit_sum;
        }
      }
      // v_unit only grows (to the largest V scale seen / 2^14), so the O rescale below is rarely needed.
      float ratio = 1.0f;
      {
        float v_max = fmaxf(v_scale[0][0], v_scale[0][1]);
#pragma unroll
        for (int sub = 1; sub < kSub; ++sub) v_max = fmaxf(v_max, fmaxf(v_scale[sub][0], v_scale[sub][1]));
#pragma unroll
        for (int offset = 4; offset < kWarpSize; offset *= 2) {
          v_max = fmaxf(v_max, __shfl_xor_sync(kFullWarpMask, v_max, offset));
        }
        const float new_unit = v_max * (1.0f / kProbScale);
        if (new_unit > v_unit) {
          ratio = v_unit / new_unit;
          v_unit = new_unit;
          inv_v_unit = kProbScale / v_max;
        }
      }
      // Rescale O columns (heads 2t, 2t + 1 of each tile); the previous unit's values (pipelined) are in o_acc.
      // (Tile 0's factors as named scalars and one condition per tile count: the v16 code for kHeadTiles = 1.)
      const float f0 = alpha[0][0] * ratio;
      const float f1 = alpha[0][1] * ratio;
      float f[kHeadTiles][2] = {{f0, f1}};
      bool rescale;
      if constexpr (kHeadTiles == 1) {
        rescale = f0 != 1.0f || f1 != 1.0f;
      } else {
        f[1][0] = alpha[1][0] * ratio;
        f[1][1] = alpha[1][1] * ratio;
        rescale = f0 != 1.0f || f1 != 1.0f || f[1][0] != 1.0f || f[1][1] != 1.0f;
      }
      if (__any_sync(kFullWarpMask, rescale)) {  // warp-uniform: skipped once max and unit settle
#pragma unroll
        for (int ht = 0; ht < kHeadTiles; ++ht) {
#pragma unroll
          for (int m = 0; m < kMTiles; ++m) {
            o_acc[ht][m][0] *= f[ht][0];
            o_acc[ht][m][1] *= f[ht][1];
            o_acc[ht][m][2] *= f[ht][0];
            o_acc[ht][m][3] *= f[ht][1];
          }
        }
      }
    }
    // P^T fragments of the value MMA: b0 = keys (2t, 2t + 1), b1 = keys (8 + 2t, 9 + 2t) of head g, i.e. the
    // transposes of the 8x8 blocks (keys g | 8 + g) x (heads 2t, 2t + 1) this thread holds (per row block).
    uint32_t pb0[kSub][kHeadTiles];
    uint32_t pb1[kSub][kHeadTiles];
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
#pragma unroll
      for (int ht = 0; ht < kHeadTiles; ++ht) {
        pb0[sub][ht] = TransposeB16x8x8(PackHalf2(prob[ht][sub][0][0] * (v_scale[sub][0] * inv_v_unit),
                                                  prob[ht][sub][0][1] * (v_scale[sub][0] * inv_v_unit)));
        pb1[sub][ht] = TransposeB16x8x8(PackHalf2(prob[ht][sub][1][0] * (v_scale[sub][1] * inv_v_unit),
                                                  prob[ht][sub][1][1] * (v_scale[sub][1] * inv_v_unit)));
      }
    }
    if constexpr (!kPipeline) {
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) {
        TransposedValueTile<kFormat, kHeadDim, kHeadTiles, kPairedKv>(
            v_stage + sub * kTile * L::kVStride, valid[sub], g, t, tab,
            TilePFrags{pb0[sub][0], pb1[sub][0], pb0[sub][kHeadTiles - 1], pb1[sub][kHeadTiles - 1]}, o_acc);
      }
      __syncwarp();  // this stage is refilled by a later iteration's copies
    } else {
      prev_stage = cur_stage;
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) {
        prev_valid[sub] = valid[sub];
        prev_pb0[sub] = pb0[sub][0];
        prev_pb1[sub] = pb1[sub][0];
        if constexpr (kHeadTiles == 2) {
          prev_pb0_t1[sub] = pb0[sub][1];
          prev_pb1_t1[sub] = pb1[sub][1];
        }
      }
      __syncwarp();  // the previous unit's stage, read above, is refilled now
      issue_next();
    }
  }
  if constexpr (kPipeline) {
    if (warp < num_units) {  // the last unit's values
#pragma unroll
      for (int sub = 0; sub < kSub; ++sub) {
        TransposedValueTile<kFormat, kHeadDim, kHeadTiles, kPairedKv>(v_rows_of(prev_stage) + sub * kTile * L::kVStride,
                                                           prev_valid[sub], g, t, tab, prev_frags(sub), o_acc);
      }
    }
  }
  MINIMAKV_TIMELINE_WARP_DONE(int(kFormat));
  AllowDependentLaunchAfterLoop(p);
  CpAsyncWait<0>();

  // ---- combine the kWarps warps. The combine area reuses the stage buffers: wait until every warp is done with them.
  __syncthreads();
  MINIMAKV_TIMELINE_STAMP_CLOCK(int(kFormat), loop_end_ns, loop_end_clk);
  constexpr int kRowWords = CombineRowWords<kHeadDim>();
  float* warp_out = reinterpret_cast<float*>(stages_base);        // [warps][kRows] rows of kRowWords
  float* warp_max = warp_out + kWarps * kRows * kRowWords;  // [warps][kRows]
  float* warp_sum = warp_max + kWarps * kRows;              // [warps][kRows]
#pragma unroll
  for (int ht = 0; ht < kHeadTiles; ++ht) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
      for (int offset = 4; offset < kWarpSize; offset *= 2) {
        row_sum[ht][hh] += __shfl_xor_sync(kFullWarpMask, row_sum[ht][hh], offset);
      }
      if (g == 0) {
        warp_max[warp * kRows + kMaxGroup * ht + 2 * t + hh] = row_max[ht][hh];
        warp_sum[warp * kRows + kMaxGroup * ht + 2 * t + hh] = row_sum[ht][hh];
      }
    }
  }
  float* my_out = warp_out + warp * kRows * kRowWords;
  const float out_unit = kImma ? v_unit * kTq3InvUnitsPerMagnitude : v_unit;  // TQ3 V scales were taken as stored
#pragma unroll
  for (int ht = 0; ht < kHeadTiles; ++ht) {
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
      const int dim0 = VDim<kFormat, kHeadDim>(g, m, 0);
      const int dim1 = VDim<kFormat, kHeadDim>(g, m, 1);
      const int head = kMaxGroup * ht + 2 * t;
      my_out[CombineIndex<kHeadDim>(head, dim0)] = o_acc[ht][m][0] * out_unit;
      my_out[CombineIndex<kHeadDim>(head + 1, dim0)] = o_acc[ht][m][1] * out_unit;
      my_out[CombineIndex<kHeadDim>(head, dim1)] = o_acc[ht][m][2] * out_unit;
      my_out[CombineIndex<kHeadDim>(head + 1, dim1)] = o_acc[ht][m][3] * out_unit;
    }
  }
  __syncthreads();
  WritePartialStates<kHeadDim, kRowWords, true, kRows, kWarps, kPairedKv>(p, heads, warp_out, warp_max, warp_sum);
  KeepStepOrder(p);
  MINIMAKV_TIMELINE_SYNC();
  MINIMAKV_TIMELINE_STAMP(int(kFormat), exit_ns);
}

// ---------------------------------------------------------------------------------------------------------
// Merge: one warp per (sequence, query head). TQ3 items first (rotated domain), one inverse rotation, then the
// other formats' items, all through MergePartialState (partial_state.h) on the lane's strided coordinates.
struct MergeParams {
  const float* part_out;
  const float* part_lse;
  const int32_t* indptr[kCudaMaxViews];  // [num_seqs + 1] items of seq s, view-local
  int item_offset[kCudaMaxViews];
  int tq3_view;  // -1 if none
  int num_views;
  int num_seqs;
  int num_q_heads;     // virtual heads per sequence (QueryRowMap)
  float* out;          // the caller's arrays: row (seq, virtual head) goes to OutputRow
  float* lse_log2;
  QueryRowMap rows;
  CudaSignBits signs;
  float inv_sqrt_dim;
};

// Where the merged state of (seq, virtual head) goes in the caller's out / lse_log2: the row itself for one query
// token, else its token-major position (session 17: the merge writes it there, no copy kernel after it).
__device__ inline size_t OutputRow(const MergeParams& p, int row, int seq, int head) {
  return p.rows.query_tokens == 1 ? size_t(row) : CallerRow(p.rows, seq, head);
}

// Merges the items of one view of (seq, head) into one state, then that state into acc via MergePartialState.
// Items in parallel: lanes reduce the max and the weight sum of the LSEs; the outputs are then accumulated with
// their weights in item order, kUnroll items' loads in flight at a time. The dependent global round trips are
// what this kernel's time is made of, so the first kUnroll outputs are loaded together with the LSEs, and each lane
// keeps its LSE (item lane) in a register for the weights instead of reading it again.
// [begin, end): the view's items of seq (its indptr entries, read by the caller before its PDL wait).
template <int kHeadDim>
__device__ inline void MergeView(const MergeParams& p, int v, int begin, int end, int head, int lane,
                                 float (&acc)[kHeadDim / kWarpSize], float* acc_lse) {
  constexpr int kPerLane = kHeadDim / kWarpSize;
  constexpr int kUnroll = 8;
  if (begin == end) return;
  const size_t first_state = size_t(p.item_offset[v] + begin) * p.num_q_heads + head;
  const size_t stride = size_t(p.num_q_heads);
  const int n = end - begin;
  auto load_outputs = [&](int i0, float (&other)[kUnroll][kPerLane]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t state = first_state + size_t(min(i0 + u, n - 1)) * stride;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) other[u][k] = p.part_out[state * kHeadDim + lane + kWarpSize * k];
    }
  };
  const float lane_lse = lane < n ? p.part_lse[first_state + lane * stride] : -INFINITY;
  float other[kUnroll][kPerLane];
  load_outputs(0, other);
  float max_lse = lane_lse;
  for (int i = lane + kWarpSize; i < n; i += kWarpSize) max_lse = fmaxf(max_lse, p.part_lse[first_state + i * stride]);
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    max_lse = fmaxf(max_lse, __shfl_xor_sync(kFullWarpMask, max_lse, offset));
  }
  float view_out[kPerLane];
  float view_lse;
  if (max_lse == -INFINITY || max_lse == INFINITY) {
    // All empty, or an infinite LSE: the exact edge-case rules of MergePartialState, item by item.
    view_lse = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) view_out[k] = 0.0f;
    for (int i = 0; i < n; ++i) {
      const size_t state = first_state + i * stride;
      float item_out[kPerLane];
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) item_out[k] = p.part_out[state * kHeadDim + lane + kWarpSize * k];
      MergePartialState(view_out, &view_lse, item_out, p.part_lse[state], kPerLane);
    }
  } else {
    float weight_sum = lane < n ? exp2f(lane_lse - max_lse) : 0.0f;
    for (int i = lane + kWarpSize; i < n; i += kWarpSize) weight_sum += exp2f(p.part_lse[first_state + i * stride] - max_lse);
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      weight_sum += __shfl_xor_sync(kFullWarpMask, weight_sum, offset);
    }
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) view_out[k] = 0.0f;
    for (int i0 = 0; i0 < n; i0 += kUnroll) {
      if (i0 > 0) load_outputs(i0, other);
      float weight[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u;
        // Item i's LSE: from lane i's register for the first 32 items (a warp-uniform shuffle), else from memory.
        const float lse_from_lane = __shfl_sync(kFullWarpMask, lane_lse, i % kWarpSize);
        const float item_lse = i < kWarpSize ? lse_from_lane : p.part_lse[first_state + size_t(min(i, n - 1)) * stride];
        weight[u] = i < n ? exp2f(item_lse - max_lse) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) view_out[k] += weight[u] == 0.0f ? 0.0f : weight[u] * other[u][k];
      }
    }
    const float inv = 1.0f / weight_sum;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) view_out[k] *= inv;
    view_lse = max_lse + log2f(weight_sum);
  }
  MergePartialState(acc, acc_lse, view_out, view_lse, kPerLane);
}

template <int kHeadDim>
__global__ void __launch_bounds__(kMergeWarps * kWarpSize) MergeKernel(MergeParams p) {
  constexpr int kPerLane = kHeadDim / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  MINIMAKV_TIMELINE_ENTRY(kCudaTimelineMerge);
  const int row = blockIdx.x * kMergeWarps + threadIdx.x / kWarpSize;
  const bool has_row = row < p.num_seqs * p.num_q_heads;
  const int seq = has_row ? row / p.num_q_heads : 0;
  const int head = row % p.num_q_heads;
  // The row's item ranges per view (the plan's upload, not written by this step's kernels).
  int begin[kCudaMaxViews], end[kCudaMaxViews];
  auto read_ranges = [&] {
#pragma unroll
    for (int v = 0; v < kCudaMaxViews; ++v) {
      begin[v] = v < p.num_views ? p.indptr[v][seq] : 0;
      end[v] = v < p.num_views ? p.indptr[v][seq + 1] : 0;
    }
  };
  // Session 14: read before the PDL wait, as MergeRowKernel does since v19 (MINIMAKV_MERGE_EARLY_INDEX).
  if (kMergeEarlyIndex) read_ranges();
  WaitForPriorGrids();  // the partial states of this step
  MINIMAKV_TIMELINE_STAMP(kCudaTimelineMerge, ready_ns);
  if (!has_row) return;
  if (!kMergeEarlyIndex) read_ranges();
  // The view's range without a run-time register index (v < kCudaMaxViews = 3).
  static_assert(kCudaMaxViews == 3, "begin_of / end_of select among three views");
  auto begin_of = [&](int v) { return v == 0 ? begin[0] : v == 1 ? begin[1] : begin[2]; };
  auto end_of = [&](int v) { return v == 0 ? end[0] : v == 1 ? end[1] : end[2]; };
  float acc[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) acc[k] = 0.0f;
  float acc_lse = -INFINITY;
  if (p.tq3_view >= 0) {
    MergeView<kHeadDim>(p, p.tq3_view, begin_of(p.tq3_view), end_of(p.tq3_view), head, lane, acc, &acc_lse);
    // x = D H y / sqrt(d): the one inverse rotation of this head's TQ3 output.
    cuda_detail::WarpFwht<kHeadDim>(acc, lane);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      acc[k] = acc[k] * p.inv_sqrt_dim * cuda_detail::SignOf(p.signs, lane + kWarpSize * k);
    }
  }
  for (int v = 0; v < p.num_views; ++v) {
    if (v != p.tq3_view) MergeView<kHeadDim>(p, v, begin_of(v), end_of(v), head, lane, acc, &acc_lse);
  }
  MINIMAKV_TIMELINE_STAMP(kCudaTimelineMerge, loop_end_ns);
  const size_t out_row = OutputRow(p, row, seq, head);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) p.out[out_row * kHeadDim + lane + kWarpSize * k] = acc[k];
  if (lane == 0) p.lse_log2[out_row] = acc_lse;
  MINIMAKV_TIMELINE_STAMP(kCudaTimelineMerge, exit_ns);
}

// v10 merge: one CTA of kWarps warps per (sequence, query head) row. The row's items of
// all views form one list (view by view); warp w takes items w, w + W, ... and loads the LSEs and outputs of its
// first kRowUnroll items at once (beyond that, one LSE per lane too), so a row with up to W * kRowUnroll items costs
// one dependent global round trip instead of one per view and per 8 items (v9: Qwen 32K b8 has 12 TQ3 + 7 FP8
// items per row: three round trips; batch 1 about 100 TQ3 items: thirteen). Each warp keeps two states, TQ3 items
// (rotated domain) and the others, rotates its TQ3 state back and merges the two; warp 0 then merges the warps'
// states from shared memory.
template <int kHeadDim, int kWarps>
__global__ void __launch_bounds__(kWarps * kWarpSize) MergeRowKernel(MergeParams p) {
  constexpr int kPerLane = kHeadDim / kWarpSize;
  constexpr int kRowUnroll = 8;
  constexpr int kClasses = 2;  // 0: TQ3 items (rotated domain), 1: the other formats' items
  __shared__ float warp_out[kWarps][kHeadDim];
  __shared__ float warp_lse[kWarps];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  MINIMAKV_TIMELINE_ENTRY(kCudaTimelineMerge);
#if !MINIMAKV_MERGE_EARLY_INDEX
  WaitForPriorGrids();  // the partial states of this step
  MINIMAKV_TIMELINE_STAMP(kCudaTimelineMerge, ready_ns);
#endif
  const int row = blockIdx.x;
  const int seq = row / p.num_q_heads;
  const int head = row % p.num_q_heads;
  // The row's items: view v holds list positions [first[v], first[v + 1]); its item i is partial state
  // base[v] + i * num_q_heads.
  int first[kCudaMaxViews + 1];
  size_t base[kCudaMaxViews];
  first[0] = 0;
#pragma unroll
  for (int v = 0; v < kCudaMaxViews; ++v) {
    const int begin = v < p.num_views ? p.indptr[v][seq] : 0;
    const int end = v < p.num_views ? p.indptr[v][seq + 1] : 0;
    base[v] = size_t((v < p.num_views ? p.item_offset[v] : 0) + begin) * p.num_q_heads + head;
    first[v + 1] = first[v] + (end - begin);
  }
  const int total = first[kCudaMaxViews];
#if MINIMAKV_MERGE_EARLY_INDEX
  WaitForPriorGrids();  // the partial states of this step (the item lists above are the plan's: read before it)
  MINIMAKV_TIMELINE_STAMP(kCudaTimelineMerge, ready_ns);
#endif
  static_assert(kCudaMaxViews == 3, "state_of selects among three views");
  auto state_of = [&](int item) {  // partial-state index of list position item (< total); selects, no local memory
    const bool v2 = item >= first[2];
    const bool v1 = item >= first[1];
    const size_t view_base = v2 ? base[2] : v1 ? base[1] : base[0];
    const int view_first = v2 ? first[2] : v1 ? first[1] : 0;
    return view_base + size_t(item - view_first) * p.num_q_heads;
  };
  auto class_of = [&](int item) {
    const int v = item >= first[2] ? 2 : item >= first[1] ? 1 : 0;
    return v == p.tq3_view ? 0 : 1;
  };
  const int count = total > warp ? (total - warp + kWarps - 1) / kWarps : 0;  // this warp's items
  // Loads, all in one round trip: the LSEs and outputs of the warp's first kRowUnroll items (every lane loads the
  // LSEs: same addresses, one transaction each); with more items, also the LSE of item j in lane j (j < 32), whose
  // class maxima then take shuffle reductions. With at most kRowUnroll items (batch >= 8) no shuffle is needed.
  const bool few_items = count <= kRowUnroll;  // warp-uniform
  float lane_lse = -INFINITY;
  int lane_class = -1;
  if (!few_items) {
    const int lane_item = warp + kWarps * lane;
    lane_lse = lane < count ? p.part_lse[state_of(lane_item)] : -INFINITY;
    lane_class = lane < count ? class_of(lane_item) : -1;
  }
  float other[kRowUnroll][kPerLane];
  float item_lse[kRowUnroll];
  auto load_outputs = [&](int j0) {
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      const size_t state = state_of(warp + kWarps * min(j0 + u, max(count - 1, 0)));
      item_lse[u] = j0 + u < count ? p.part_lse[state] : -INFINITY;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        other[u][k] = count > 0 ? p.part_out[state * kHeadDim + lane + kWarpSize * k] : 0.0f;
      }
    }
  };
  load_outputs(0);
  float acc[kClasses][kPerLane];
  float acc_lse[kClasses] = {-INFINITY, -INFINITY};  // each class's max LSE first, its LSE at the end
#pragma unroll
  for (int c = 0; c < kClasses; ++c) {
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) acc[c][k] = 0.0f;
  }
  if (few_items) {
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (u >= count) break;  // warp-uniform
      if (class_of(warp + kWarps * u) == 0) {
        acc_lse[0] = fmaxf(acc_lse[0], item_lse[u]);
      } else {
        acc_lse[1] = fmaxf(acc_lse[1], item_lse[u]);
      }
    }
  } else {
#pragma unroll
    for (int c = 0; c < kClasses; ++c) {
      // Max of the class's LSEs over the warp's items (lanes beyond 32 items: from memory).
      float max_lse = lane_class == c ? lane_lse : -INFINITY;
      for (int j = lane + kWarpSize; j < count; j += kWarpSize) {
        const int item = warp + kWarps * j;
        if (class_of(item) == c) max_lse = fmaxf(max_lse, p.part_lse[state_of(item)]);
      }
#pragma unroll
      for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
        max_lse = fmaxf(max_lse, __shfl_xor_sync(kFullWarpMask, max_lse, offset));
      }
      acc_lse[c] = max_lse;
    }
  }
  const bool finite = acc_lse[0] != INFINITY && acc_lse[1] != INFINITY;
  if (finite) {
    // Weights against the class maxima, summed in item order as the outputs are accumulated.
    float weight_sum[kClasses] = {0.0f, 0.0f};
    for (int j0 = 0; j0 < count; j0 += kRowUnroll) {
      if (j0 > 0) load_outputs(j0);
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int j = j0 + u;
        if (j >= count) break;  // warp-uniform
        const int c = class_of(warp + kWarps * j);
        const float class_max = c == 0 ? acc_lse[0] : acc_lse[1];  // (no run-time register index)
        if (class_max == -INFINITY) continue;  // only empty items in the class
        const float weight = exp2f(item_lse[u] - class_max);  // 0 for an empty item (-inf)
        if (weight == 0.0f) continue;
        if (c == 0) {
          weight_sum[0] += weight;
        } else {
          weight_sum[1] += weight;
        }
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          if (c == 0) {
            acc[0][k] += weight * other[u][k];
          } else {
            acc[1][k] += weight * other[u][k];
          }
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kClasses; ++c) {
      if (acc_lse[c] == -INFINITY) continue;
      const float inv = 1.0f / weight_sum[c];
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) acc[c][k] *= inv;
      acc_lse[c] += log2f(weight_sum[c]);
    }
  } else {
    // An infinite LSE: the exact edge-case rules of MergePartialState, item by item.
    acc_lse[0] = acc_lse[1] = -INFINITY;
    for (int j = 0; j < count; ++j) {
      const int item = warp + kWarps * j;
      const size_t state = state_of(item);
      float item_out[kPerLane];
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) item_out[k] = p.part_out[state * kHeadDim + lane + kWarpSize * k];
      if (class_of(item) == 0) {
        MergePartialState(acc[0], &acc_lse[0], item_out, p.part_lse[state], kPerLane);
      } else {
        MergePartialState(acc[1], &acc_lse[1], item_out, p.part_lse[state], kPerLane);
      }
    }
  }
  // The warp's TQ3 state is rotated back (x = D H y / sqrt(d); linear, so rotating each warp's part equals rotating
  // their merge) and merged with its other state: one state per warp, and the rotations run in parallel.
  if (p.tq3_view >= 0 && acc_lse[0] != -INFINITY) {  // warp-uniform
    cuda_detail::WarpFwht<kHeadDim>(acc[0], lane);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      acc[0][k] = acc[0][k] * p.inv_sqrt_dim * cuda_detail::SignOf(p.signs, lane + kWarpSize * k);
    }
  }
  MergePartialState(acc[0], &acc_lse[0], acc[1], acc_lse[1], kPerLane);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) warp_out[warp][lane + kWarpSize * k] = acc[0][k];
  if (lane == 0) warp_lse[warp] = acc_lse[0];
  __syncthreads();
  MINIMAKV_TIMELINE_STAMP(kCudaTimelineMerge, loop_end_ns);
  if (warp != 0) return;
  // Warp 0 merges the kWarps states at once: weights from the common max (independent exp2s), one division.
  float lse[kWarps];
  float max_lse = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    lse[w] = warp_lse[w];
    max_lse = fmaxf(max_lse, lse[w]);
  }
  float out[kPerLane];
  float out_lse = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) out[k] = 0.0f;
  if (max_lse == -INFINITY || max_lse == INFINITY) {  // all empty, or an infinite LSE: the exact rules, in order
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      float part[kPerLane];
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) part[k] = warp_out[w][lane + kWarpSize * k];
      MergePartialState(out, &out_lse, part, lse[w], kPerLane);
    }
  } else {
    float weight_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = exp2f(lse[w] - max_lse);  // 0 for an empty warp state
      weight_sum += weight;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        out[k] += weight == 0.0f ? 0.0f : weight * warp_out[w][lane + kWarpSize * k];
      }
    }
    const float inv = 1.0f / weight_sum;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) out[k] *= inv;
    out_lse = max_lse + log2f(weight_sum);
  }
  const size_t out_row = OutputRow(p, row, seq, head);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) p.out[out_row * kHeadDim + lane + kWarpSize * k] = out[k];
  if (lane == 0) p.lse_log2[out_row] = out_lse;
  MINIMAKV_TIMELINE_STAMP(kCudaTimelineMerge, exit_ns);
}

// Raises the dynamic shared memory limit of a partial kernel (once per instantiation; Plan::Create calls it before
// any run, so a graph capture of the run only sees launches).
// v17: the most query heads one CTA of a format / head_dim takes (two 8-head MMA tiles sharing one K / V read, or
// one). FP8 and TQ3 at d = 64 / 128 and BF16 at every head_dim have two-tile kernels; FP8 / TQ3 at d = 256 keep
// tiles of 8 (64 output accumulators per tile would not fit twice next to the TQ3 expansion's registers).
constexpr bool HasTwoHeadTiles(KvFormat format, int head_dim) {
  return kTwoHeadTiles && (format == KvFormat::kBf16 ? kBf16TwoHeadTiles : head_dim <= 128);
}
// The step's launch order of its views (v25: TQ3 first; TQ3 last measured 1-4% slower for the mix): the plan
// splits the views in this order too (session 17: later views fit beside a one-wave TQ3 view). format_of(v) gives
// view v's format; returns the number of views ordered (num_views).
template <typename FormatOf>
int TqFirstOrder(int num_views, FormatOf format_of, int (&order)[kCudaMaxViews]) {
  int num_ordered = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int v = 0; v < num_views; ++v) {
      if ((format_of(v) == KvFormat::kTq3) == (pass == 0)) order[num_ordered++] = v;
    }
  }
  return num_ordered;
}

constexpr int MaxCtaHeads(KvFormat format, int head_dim) {
  return HasTwoHeadTiles(format, head_dim) ? 2 * kMaxGroup : kMaxGroup;
}
// v23: the TQ3 kernel also exists as one wide CTA per SM (all the warps of the narrow CTAs an SM holds, units dealt
// round-robin to them) at head_dim 128 with one head tile. Narrow co-resident TQ3 CTAs run their key loops at very
// different speeds (v22), a wide one keeps all its warps busy to the end; narrow CTAs split the grid finer and free
// SMs early for the step's other formats. Same-run A/B (docs/cuda-notes.md v23, Llama-3-8B layer, 5 rounds): wide
// TQ3 / mix at batch 8 and 32 2.0-7.4% / 0.3-5.1% faster; at batch 1 TQ3 up to 2.4% and the mix 3.4-19.6% slower
// (its FP8 CTAs wait for the wide TQ3 CTAs instead of filling early-freed slots). Qwen's d = 256 kernel (8 warps per
// SM either way) gained nothing at batch 8 (within 0.6%; mix up to 2.1% slower) and stays narrow.
constexpr bool HasWideTq3(KvFormat format, int head_dim, int cta_heads) {
  return format == KvFormat::kTq3 && head_dim == 128 && cta_heads <= kMaxGroup;
}
// CudaTq3Ctas::kAuto: wide when the view's (sequence, KV head) rows leave at most kWideTq3MaxSmsPerRow SMs per row
// (measured: 64 rows on 132 SMs faster, 8 rows slower); a row spread over more SMs is split into many short CTAs,
// which the finer narrow grid packs better.
constexpr int kWideTq3MaxSmsPerRow = 4;
bool UseWideTq3(CudaTq3Ctas choice, KvFormat format, int head_dim, int cta_heads, int64_t rows, int sm_count) {
  if (!HasWideTq3(format, head_dim, cta_heads) || choice == CudaTq3Ctas::kNarrow) return false;
  if (choice == CudaTq3Ctas::kPaired) return false;
  return choice == CudaTq3Ctas::kWide || rows * kWideTq3MaxSmsPerRow >= int64_t(sm_count);
}
// v27: TQ3 at head_dim 128 with groups of 4 (Llama-3's 32 / 8) and an even number of KV heads runs the head_dim-256
// kernel over KV head pairs (kPairedKv, PairedHeadTile): the 8 MMA columns hold 4 + 4 query heads instead of 4 and 4
// zero rows, so a unit's softmax, bookkeeping and copies serve twice the bytes.
// Session 15: groups of 1-3 too (Llama-3.2-3B's 24 / 8, Qwen3-1.7B's 16 / 8), in gapped rows (PairedHeadTile).
constexpr bool HasPairedTq3(KvFormat format, int head_dim, int group, int kv_heads) {
  return format == KvFormat::kTq3 && (head_dim == 128 || head_dim == 64) && 2 * group <= kMaxGroup &&
         kv_heads % 2 == 0;
}
bool UsePairedTq3(CudaTq3Ctas choice, KvFormat format, int head_dim, int group, int kv_heads) {
  return HasPairedTq3(format, head_dim, group, kv_heads) &&
         (choice == CudaTq3Ctas::kAuto || choice == CudaTq3Ctas::kPaired);
}

// The partial kernel of a format: TQ3 and FP8 (v8) run the transposed kernel, BF16 DecodePartialKernel.
template <KvFormat kFormat, int kHeadDim, int kHeadTiles = 1, bool kWideCta = false, bool kPairedKv = false>
constexpr auto PartialKernel() {
  if constexpr (kFormat != KvFormat::kBf16) {
    return DecodePartialTransposedKernel<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>;
  } else {
    return DecodePartialKernel<kFormat, kHeadDim, kHeadTiles>;
  }
}

template <KvFormat kFormat, int kHeadDim, int kHeadTiles = 1, bool kWideCta = false, bool kPairedKv = false>
cudaError_t PreparePartial() {
  static const cudaError_t status =
      cudaFuncSetAttribute(PartialKernel<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>(),
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           TileLayout<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>::kSmemBytes);
  return status;
}

// Resident CTAs per SM of a partial kernel (the split fills whole waves of these).
template <KvFormat kFormat, int kHeadDim, int kHeadTiles = 1, bool kWideCta = false, bool kPairedKv = false>
Status PartialOccupancy(int* ctas_per_sm) {
  using L = TileLayout<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>;
  MINIMAKV_RETURN_IF_ERROR(CudaError(PreparePartial<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>(),
                                     "partial kernel smem attribute"));
  return CudaError(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                       ctas_per_sm, PartialKernel<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>(),
                       L::kThreads, L::kSmemBytes),
                   "occupancy query");
}
// The one runtime -> template dispatch of the partial kernels (occupancy in the plan, launches in the run):
// calls fn.template operator()<format, head_dim, head tiles, wide, paired>() for the kernel that serves CTAs of
// cta_heads query heads (> kMaxGroup: the two-tile kernel, which exists for BF16 at every head_dim and FP8 / TQ3 at
// 64 / 128); paired (v27): the head_dim-256 TQ3 kernel over KV head pairs of head_dim 128 (v28: and the head_dim-128
// one over pairs of head_dim 64).
template <typename Fn>
Status WithPartialKernel(KvFormat format, int head_dim, int cta_heads, bool wide, bool paired, Fn&& fn) {
  const bool two = cta_heads > kMaxGroup;
  if (wide && !HasWideTq3(format, head_dim, cta_heads)) return Status::Internal("no wide kernel for this view");
  if (paired) {  // the kernel of twice the pages' head_dim over two KV heads
    if (format != KvFormat::kTq3 || (head_dim != 128 && head_dim != 64) || wide || two) {
      return Status::Internal("no paired kernel for this view");
    }
    return head_dim == 128 ? fn.template operator()<KvFormat::kTq3, 256, 1, false, true>()
                           : fn.template operator()<KvFormat::kTq3, 128, 1, false, true>();
  }
  auto for_dim = [&]<int kHeadDim>() -> Status {
    auto for_format = [&]<KvFormat kFormat>() -> Status {
      if constexpr (kFormat == KvFormat::kBf16 || kHeadDim <= 128) {
        if (two) return fn.template operator()<kFormat, kHeadDim, 2, false, false>();
      }
      if (two) return Status::Internal("no two-head-tile kernel for this format / head_dim");
      if constexpr (HasWideTq3(kFormat, kHeadDim, kMaxGroup)) {
        if (wide) return fn.template operator()<kFormat, kHeadDim, 1, true, false>();
      }
      return fn.template operator()<kFormat, kHeadDim, 1, false, false>();
    };
    switch (format) {
      case KvFormat::kBf16: return for_format.template operator()<KvFormat::kBf16>();
      case KvFormat::kFp8: return for_format.template operator()<KvFormat::kFp8>();
      case KvFormat::kTq3: return for_format.template operator()<KvFormat::kTq3>();
    }
    return Status::Internal("unknown format");
  };
  switch (head_dim) {
    case 256: return for_dim.template operator()<256>();
    case 128: return for_dim.template operator()<128>();
    case 64: return for_dim.template operator()<64>();
  }
  return Status::Internal("partial kernel for head_dim " + std::to_string(head_dim));
}

// A kernel launch; programmatic = may overlap the previous kernel of the stream (see AllowDependentLaunch).
template <typename... KernelArgs, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                         bool programmatic, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = programmatic && kProgrammaticLaunch ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <KvFormat kFormat, int kHeadDim, int kHeadTiles = 1, bool kWideCta = false, bool kPairedKv = false>
Status LaunchPartial(const DecodeParams& params, int items, int kv_heads, cudaStream_t stream, bool programmatic) {
  using L = TileLayout<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>;
  MINIMAKV_RETURN_IF_ERROR(CudaError(PreparePartial<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>(),
                                     "partial kernel smem attribute"));
  // grid y: every head tile of every KV head (CtaHeadTile), or every KV head pair (PairedHeadTile).
  const unsigned head_ctas = kPairedKv ? unsigned(kv_heads) / 2 : unsigned(kv_heads) * unsigned(params.head_tiles);
  return CudaError(LaunchKernel(PartialKernel<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>(),
                                dim3(unsigned(items), head_ctas), dim3(L::kThreads), L::kSmemBytes, stream,
                                programmatic, params),
                   "decode partial kernel launch");
}

}  // namespace

// -------------------------------------------------------------------------------------------------------------
// Plan

Status CudaDecodePlan::Create(const CudaDecodeShape& shape, const CudaViewLengths* views, int num_views,
                              int sm_count, CudaDecodePlan* out) {
  if (shape.num_seqs < 0) return Status::InvalidArgument("num_seqs " + std::to_string(shape.num_seqs) + " < 0");
  if (shape.head_dim != 64 && shape.head_dim != 128 && shape.head_dim != 256) {
    return Status::Unsupported("CUDA decode takes head_dim 64, 128 or 256, not " + std::to_string(shape.head_dim));
  }
  if (shape.kv_heads <= 0 || shape.num_q_heads <= 0 || shape.num_q_heads % shape.kv_heads != 0) {
    return Status::InvalidArgument("num_q_heads " + std::to_string(shape.num_q_heads) +
                                   " is not a positive multiple of kv_heads " + std::to_string(shape.kv_heads));
  }
  const int head_group = shape.num_q_heads / shape.kv_heads;
  if (head_group > kMaxQueryGroup) {
    return Status::Unsupported("GQA group " + std::to_string(head_group) + " (num_q_heads " +
                               std::to_string(shape.num_q_heads) + " / kv_heads " + std::to_string(shape.kv_heads) +
                               ") exceeds the CUDA decode limit of " + std::to_string(kMaxQueryGroup) +
                               " query heads per KV head");
  }
  if (shape.query_tokens < 1) {
    return Status::InvalidArgument("query_tokens " + std::to_string(shape.query_tokens) + " < 1");
  }
  if (int64_t(head_group) * shape.query_tokens > kMaxQueryGroup) {
    return Status::Unsupported("query_tokens " + std::to_string(shape.query_tokens) + " x GQA group " +
                               std::to_string(head_group) + " = " +
                               std::to_string(int64_t(head_group) * shape.query_tokens) +
                               " query rows per KV head exceed the CUDA decode limit of " +
                               std::to_string(kMaxQueryGroup));
  }
  // The plan, the kernels and the merge work on query rows: a KV head's group of query heads times the tokens.
  const int group = head_group * shape.query_tokens;
  // int products of the launches (rows of the merge grid and of the copies, grid y = KV heads x CTAs per KV head).
  if (shape.kv_heads > kMaxKvHeads) {
    return Status::Unsupported("kv_heads " + std::to_string(shape.kv_heads) + " exceeds the CUDA decode limit of " +
                               std::to_string(kMaxKvHeads));
  }
  if (int64_t(shape.num_seqs) * shape.num_q_heads * shape.query_tokens > INT32_MAX) {
    return Status::InvalidArgument("num_seqs " + std::to_string(shape.num_seqs) + " x num_q_heads " +
                                   std::to_string(shape.num_q_heads) + " x query_tokens " +
                                   std::to_string(shape.query_tokens) + " query rows exceed 2^31 - 1");
  }
  if (!(shape.sm_scale > 0.0f) || !std::isfinite(shape.sm_scale)) {
    return Status::InvalidArgument("sm_scale " + std::to_string(shape.sm_scale) + " must be positive and finite");
  }
  if (num_views < 0 || num_views > kCudaMaxViews) {
    return Status::InvalidArgument("num_views " + std::to_string(num_views) + " outside [0, 3]");
  }
  if (sm_count <= 0) return Status::InvalidArgument("sm_count " + std::to_string(sm_count) + " <= 0");
  CudaDecodePlan plan;
  plan.shape_ = shape;
  plan.num_views_ = num_views;
  std::vector<std::vector<CudaWorkItem>> items(num_views);
  std::vector<std::vector<int32_t>> indptr(num_views);
  bool seen[kNumKvFormats] = {};
  // Views in launch order (CudaDecodePartialsLaunch): TQ3 first, so that the views after it can be planned into the
  // slots its CTAs leave free (session 17, below).
  int plan_order[kCudaMaxViews];
  TqFirstOrder(num_views, [&](int v) { return views[v].format; }, plan_order);
  // A view's (sequence, KV head) rows with work, before the CTAs per row; and the CTA slots of one wave of a partial
  // kernel (its resident CTAs per SM x SMs). Shared by the split below and by demand_beside_tq3.
  auto head_ctas_of = [&](KvFormat format) {  // CTAs per KV head: the group split into CTAs of near-equal size
    const int max_cta_heads = MaxCtaHeads(format, shape.head_dim);
    return (group + max_cta_heads - 1) / max_cta_heads;
  };
  auto seqs_with_work = [&](const CudaViewLengths& view) {
    int64_t seqs = 0;
    for (int s = 0; s < shape.num_seqs; ++s) seqs += view.page_indptr[s + 1] > view.page_indptr[s] ? 1 : 0;
    return seqs;
  };
  auto wave_slots = [&](KvFormat format, int cta_heads, bool wide, bool paired, int64_t* slots) -> Status {
    int ctas_per_sm = 0;
    MINIMAKV_RETURN_IF_ERROR(WithPartialKernel(
        format, shape.head_dim, cta_heads, wide, paired,
        [&]<KvFormat kFormat, int kHeadDim, int kHeadTiles, bool kWideCta, bool kPairedKv>() {
          return PartialOccupancy<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>(&ctas_per_sm);
        }));
    *slots = int64_t(std::max(1, ctas_per_sm)) * sm_count;
    return Status::Ok();
  };
  double free_share = 0.0;     // share of the GPU's CTA slots a one-wave TQ3 view leaves free (0: none)
  int64_t tq3_chunk_pages = 0;  // that TQ3 view's chunk
  // The least CTA slots of a TQ3 view (tq3_slots per wave) that the other views need to run all their (sequence, KV
  // head) rows beside it at once: each view's rows scaled by the two kernels' resident CTAs per SM. Views that are
  // not valid count nothing here (their checks come when they are planned).
  auto demand_beside_tq3 = [&](int64_t tq3_slots, int64_t* demand) -> Status {
    *demand = 0;
    for (int k = 1; k < num_views; ++k) {
      const CudaViewLengths& other = views[plan_order[k]];
      if (int(other.format) < 0 || int(other.format) >= kNumKvFormats || other.format == KvFormat::kTq3 ||
          other.page_indptr == nullptr) {
        continue;
      }
      const int other_head_ctas = head_ctas_of(other.format);
      const int64_t other_rows = seqs_with_work(other) * shape.kv_heads * other_head_ctas;
      int64_t other_slots = 0;
      MINIMAKV_RETURN_IF_ERROR(
          wave_slots(other.format, (group + other_head_ctas - 1) / other_head_ctas, false, false, &other_slots));
      *demand += (other_rows * tq3_slots + other_slots - 1) / other_slots;
    }
    return Status::Ok();
  };
  for (int k = 0; k < num_views; ++k) {
    const int v = plan_order[k];
    const CudaViewLengths& view = views[v];
    const int f = int(view.format);
    if (f < 0 || f >= kNumKvFormats || seen[f]) {
      return Status::InvalidArgument("view " + std::to_string(v) + ": format repeated or unknown");
    }
    seen[f] = true;
    if (view.page_tokens <= 0 || view.page_tokens % kCudaKeyTileTokens != 0) {
      return Status::Unsupported("view " + std::to_string(v) + ": page_tokens " + std::to_string(view.page_tokens) +
                                 " is not a positive multiple of 16 (the CUDA key tile)");
    }
    if (view.page_indptr == nullptr || view.last_page_tokens == nullptr) {
      return Status::InvalidArgument("view " + std::to_string(v) + ": null host page_indptr or last_page_tokens");
    }
    plan.formats_[v] = view.format;
    plan.page_tokens_[v] = view.page_tokens;
    // v16: a group larger than one CTA takes runs as ceil(group / max) CTAs of near-equal size (v16, 8 heads per
    // CTA: 12 -> 6 + 6, 9 -> 5 + 4), each reading the KV head's pages once more (L2 absorbs part of it: the CTAs
    // are adjacent in the grid). v17: BF16, and FP8 / TQ3 at d <= 128, take up to 16 heads per CTA (two MMA head
    // tiles, one read): groups 9-16 are one CTA, larger ones split by 16 (24 -> 12 + 12, 64 -> 4 x 16).
    plan.head_ctas_[v] = head_ctas_of(view.format);
    plan.cta_heads_[v] = (group + plan.head_ctas_[v] - 1) / plan.head_ctas_[v];
    if (view.page_indptr[0] != 0) return Status::InvalidArgument("view page_indptr[0] must be 0");
    for (int s = 0; s < shape.num_seqs; ++s) {
      const int pages = view.page_indptr[s + 1] - view.page_indptr[s];
      if (pages < 0) return Status::InvalidArgument("view page_indptr decreases at seq " + std::to_string(s));
      if (pages > 0 && (view.last_page_tokens[s] < 1 || view.last_page_tokens[s] > view.page_tokens)) {
        return Status::InvalidArgument("view " + std::to_string(v) + ": last_page_tokens[" + std::to_string(s) +
                                       "] = " + std::to_string(view.last_page_tokens[s]) + " outside [1, page_tokens]");
      }
    }
    // Split: chunks of at most chunk_pages pages per sequence; each chunk x KV head is one CTA. Pick chunk_pages
    // minimizing the modeled step time, waves(chunk) * (chunk + per-CTA overhead), waves = ceil(CTAs / resident
    // slots): whole waves, no mostly-empty last wave (a 1.45-wave split costs 27% of the bandwidth).
    plan.paired_[v] = UsePairedTq3(shape.tq3_ctas, view.format, shape.head_dim, group, shape.kv_heads);
    // CTAs per (sequence, chunk): one per head tile of each KV head, or one per KV head pair.
    const int64_t row_ctas =
        plan.paired_[v] ? int64_t(shape.kv_heads / 2) : int64_t(shape.kv_heads) * plan.head_ctas_[v];
    const int64_t rows = seqs_with_work(view) * row_ctas;  // (sequence, KV head) rows with work, in CTAs
    plan.wide_[v] = !plan.paired_[v] &&
                    UseWideTq3(shape.tq3_ctas, view.format, shape.head_dim, plan.cta_heads_[v], rows, sm_count);
    int64_t slots = 0;
    MINIMAKV_RETURN_IF_ERROR(wave_slots(view.format, plan.cta_heads_[v], plan.wide_[v], plan.paired_[v], &slots));
    int64_t max_seq_pages = 1;
    for (int s = 0; s < shape.num_seqs; ++s) {
      max_seq_pages = std::max<int64_t>(max_seq_pages, view.page_indptr[s + 1] - view.page_indptr[s]);
    }
    const int64_t min_pages = std::min<int64_t>(max_seq_pages, (kMinChunkTokens + view.page_tokens - 1) / view.page_tokens);
    const double overhead_pages = double(kCtaOverheadTokens) / view.page_tokens;
    auto ctas_of = [&](int64_t cp) {
      int64_t ctas = 0;
      for (int s = 0; s < shape.num_seqs; ++s) ctas += (view.page_indptr[s + 1] - view.page_indptr[s] + cp - 1) / cp;
      return ctas * row_ctas;
    };
    // Session 17: a small view after a one-wave TQ3 view (batch 1: the mix's anchor and recent FP8 pages) takes the
    // smallest chunk whose CTAs all fit into the slots the TQ3 CTAs leave free, so they run beside the TQ3 wave
    // instead of after it (planned alone, the FP8 view took the whole GPU's slots and its last CTAs started when
    // TQ3 CTAs left, a ~3.5 us tail at Qwen 32K b1: docs/cuda-notes.md session 17) -- if that chunk is no longer
    // than the TQ3 one (else the view would outlast the TQ3 wave).
    int64_t chunk_pages = 0;
    const int64_t fit_ctas = int64_t(free_share * double(slots));
    if (view.format != KvFormat::kTq3 && rows > 0 && fit_ctas >= rows) {
      for (int64_t cp = min_pages; cp <= std::min(max_seq_pages, tq3_chunk_pages); ++cp) {
        const int64_t ctas = ctas_of(cp);
        if (ctas <= fit_ctas) {
          chunk_pages = cp;
          free_share -= double(ctas) / double(slots);
          break;
        }
      }
    }
    double best_cost = INFINITY;
    int64_t best_pages = max_seq_pages;
    for (int64_t cp = max_seq_pages; chunk_pages == 0 && cp >= min_pages; --cp) {
      const int64_t ctas = ctas_of(cp);
      const double cost = double((ctas + slots - 1) / slots) * (double(cp) + overhead_pages);
      if (cost < best_cost * 0.999) {  // prefer larger chunks (fewer items) on near-ties
        best_cost = cost;
        best_pages = cp;
      }
      if (ctas > 16 * slots) break;  // smaller chunks only add waves and merge work
    }
    if (chunk_pages == 0) chunk_pages = best_pages;
    int64_t tq3_ctas = view.format == KvFormat::kTq3 && rows > 0 ? ctas_of(chunk_pages) : 0;
    if (tq3_ctas > 0 && tq3_ctas <= slots) {  // one TQ3 wave: room beside it
      // Where the wave leaves too few free slots for the small views after it (128K batch 1: all 264), take a
      // chunk up to 10% longer that leaves them enough (a few slots; not at batch >= 8, whose FP8 rows need more).
      int64_t demand = 0;
      MINIMAKV_RETURN_IF_ERROR(demand_beside_tq3(slots, &demand));
      if (demand > 0 && slots - tq3_ctas < demand && 16 * demand <= slots) {
        for (int64_t cp = chunk_pages + 1; cp <= max_seq_pages && 10 * cp <= 11 * chunk_pages; ++cp) {
          const int64_t ctas = ctas_of(cp);
          if (ctas <= slots - demand) {
            chunk_pages = cp;
            tq3_ctas = ctas;
            break;
          }
        }
      }
      free_share = double(slots - tq3_ctas) / double(slots);
      tq3_chunk_pages = chunk_pages;
    }
    indptr[v].assign(size_t(shape.num_seqs) + 1, 0);
    for (int s = 0; s < shape.num_seqs; ++s) {
      const int begin = view.page_indptr[s];
      const int end = view.page_indptr[s + 1];
      const int pages = end - begin;
      if (pages > 0) {
        const int chunks = int((pages + chunk_pages - 1) / chunk_pages);
        for (int c = 0; c < chunks; ++c) {  // near-equal chunks
          const int cb = begin + int(int64_t(pages) * c / chunks);
          const int ce = begin + int(int64_t(pages) * (c + 1) / chunks);
          items[v].push_back({s, cb, ce, ce == end ? view.last_page_tokens[s] : view.page_tokens});
        }
      }
      indptr[v][s + 1] = int32_t(items[v].size());
    }
    plan.item_count_[v] = int(items[v].size());
    plan.item_offset_[v] = plan.total_items_;
    plan.total_items_ += plan.item_count_[v];
  }
  // Workspace: [meta: items, indptrs][partial outs][partial lse].
  size_t offset = 0;
  for (int v = 0; v < num_views; ++v) {
    plan.items_offset_bytes_[v] = offset;
    offset = AlignUp(offset + items[v].size() * sizeof(CudaWorkItem));
    plan.indptr_offset_bytes_[v] = offset;
    offset = AlignUp(offset + indptr[v].size() * sizeof(int32_t));
  }
  plan.meta_bytes_ = offset;
  plan.host_meta_.assign(offset, 0);
  for (int v = 0; v < num_views; ++v) {
    if (!items[v].empty()) {
      std::memcpy(plan.host_meta_.data() + plan.items_offset_bytes_[v], items[v].data(),
                  items[v].size() * sizeof(CudaWorkItem));
    }
    std::memcpy(plan.host_meta_.data() + plan.indptr_offset_bytes_[v], indptr[v].data(),
                indptr[v].size() * sizeof(int32_t));
  }
  plan.part_out_offset_bytes_ = offset;
  offset = AlignUp(offset + size_t(plan.total_items_) * plan.rows_per_seq() * shape.head_dim * sizeof(float));
  plan.part_lse_offset_bytes_ = offset;
  offset = AlignUp(offset + size_t(plan.total_items_) * plan.rows_per_seq() * sizeof(float));
  if (shape.query_tokens > 1) {  // the queries in virtual-head order (QueryRowMap)
    const size_t rows = size_t(shape.num_seqs) * plan.rows_per_seq();
    plan.q_rows_offset_bytes_ = offset;
    offset = AlignUp(offset + rows * shape.head_dim * sizeof(float));
  }
  plan.workspace_bytes_ = offset;
  *out = std::move(plan);
  return Status::Ok();
}

Status CudaDecodePlan::Upload(void* d_workspace, cudaStream_t stream) const {
  if (meta_bytes_ == 0) return Status::Ok();
  if (d_workspace == nullptr) return Status::InvalidArgument("d_workspace is null");
  return CudaError(cudaMemcpyAsync(d_workspace, host_meta_.data(), meta_bytes_, cudaMemcpyHostToDevice, stream),
                   "plan upload");
}

// -------------------------------------------------------------------------------------------------------------
// Run

Status CudaDecodeMergeLaunch(const CudaDecodePlan& plan, void* d_workspace, PartialStatesOut out, cudaStream_t stream,
                             bool programmatic);

Status CudaDecodePartialsLaunch(const CudaDecodePlan& plan, const PagedKvView* views, int num_views,
                                const float* d_q, void* d_workspace, cudaStream_t stream, bool* launched) {
  const CudaDecodeShape& shape = plan.shape_;
  *launched = false;
  if (num_views != plan.num_views_) {
    return Status::InvalidArgument("num_views " + std::to_string(num_views) + " differs from the plan's " +
                                   std::to_string(plan.num_views_));
  }
  if (shape.num_seqs == 0) return Status::Ok();
  if (d_q == nullptr || d_workspace == nullptr) {
    return Status::InvalidArgument("CudaDecodePartials: null query or workspace pointer");
  }
  const int group = plan.rows_per_seq() / shape.kv_heads;  // query rows per KV head
  uint8_t* ws = static_cast<uint8_t*>(d_workspace);
  float* part_out = reinterpret_cast<float*>(ws + plan.part_out_offset_bytes_);
  float* part_lse = reinterpret_cast<float*>(ws + plan.part_lse_offset_bytes_);
  const CudaSignBits signs = MakeCudaSignBits(shape.rotation_seed, shape.head_dim);
  const float inv_sqrt_dim = float(1.0 / std::sqrt(double(shape.head_dim)));

  // Launch order: the TQ3 partial kernel (it rotates its query rows itself), the other partial kernels (they
  // overlap the TQ3 kernel's last wave), the merge. Every kernel after the first is a programmatic dependent launch
  // (AllowDependentLaunch); the first one is ordered after all earlier stream work.
  for (int v = 0; v < num_views; ++v) {
    const PagedKvView& view = views[v];
    const PageLayout& layout = view.layout;
    if (layout.format != plan.formats_[v] || layout.page_tokens != plan.page_tokens_[v] ||
        layout.kv_heads != shape.kv_heads || layout.head_dim != shape.head_dim || view.num_seqs != shape.num_seqs) {
      return Status::InvalidArgument("view " + std::to_string(v) +
                                     " does not match the plan (format, page_tokens, kv_heads, head_dim, num_seqs)");
    }
    if (plan.item_count_[v] > 0 && (view.pages == nullptr || view.page_ids == nullptr)) {
      return Status::InvalidArgument("view " + std::to_string(v) + ": null pages or page_ids");
    }
  }
  // (after every check: an error returns before anything is queued or captured)
  const float* kernel_q = d_q;
  if (shape.query_tokens > 1) {  // the queries into virtual-head order (an ordinary launch: the partial kernels,
    float* q_rows = reinterpret_cast<float*>(ws + plan.q_rows_offset_bytes_);  // in stream order, read it)
    MINIMAKV_RETURN_IF_ERROR(CudaError(
        LaunchKernel(CopyQueryRowsKernel, dim3(unsigned(shape.num_seqs * plan.rows_per_seq())), dim3(kCopyRowThreads),
                     0, stream, false, d_q, q_rows, RowMap(shape), shape.head_dim),
        "query row copy launch"));
    kernel_q = q_rows;
  }
  bool programmatic = false;  // false for the step's first launch
  int order[kCudaMaxViews];
  const int num_ordered = TqFirstOrder(num_views, [&](int v) { return views[v].layout.format; }, order);
  for (int k = 0; k < num_ordered; ++k) {
    const int v = order[k];
    const PagedKvView& view = views[v];
    const PageLayout& layout = view.layout;
    if (plan.item_count_[v] == 0) continue;
    DecodeParams params{};
    params.pages = view.pages;
    params.page_ids = view.page_ids;
    params.items = reinterpret_cast<const CudaWorkItem*>(ws + plan.items_offset_bytes_[v]);
    params.q = kernel_q;
    params.signs = signs;
    params.inv_sqrt_dim = inv_sqrt_dim;
    params.part_out = part_out;
    params.part_lse = part_lse;
    params.layout = layout;
    params.item_offset = plan.item_offset_[v];
    params.num_q_heads = plan.rows_per_seq();
    params.group = group;
    params.head_tiles = plan.head_ctas_[v];
    params.tile_heads = plan.cta_heads_[v];
    params.q_scale = shape.sm_scale * kLog2e;
#if MINIMAKV_LATE_TRIGGER == 2
    bool last_launch = true;  // no later view of this step has items
    for (int later = k + 1; later < num_ordered; ++later) last_launch = last_launch && plan.item_count_[order[later]] == 0;
    params.trigger_after_loop = last_launch ? 1 : 0;
#endif
    // v17: CTAs of more than 8 query heads (the plan gives them only where HasTwoHeadTiles) run two head tiles.
    MINIMAKV_RETURN_IF_ERROR(WithPartialKernel(
        layout.format, shape.head_dim, params.tile_heads, plan.wide_[v], plan.paired_[v],
        [&]<KvFormat kFormat, int kHeadDim, int kHeadTiles, bool kWideCta, bool kPairedKv>() {
          return LaunchPartial<kFormat, kHeadDim, kHeadTiles, kWideCta, kPairedKv>(
              params, plan.item_count_[v], shape.kv_heads, stream, programmatic);
        }));
    programmatic = true;
    *launched = true;
  }
  return Status::Ok();
}

Status CudaDecodePartials(const CudaDecodePlan& plan, const PagedKvView* views, int num_views, const float* d_q,
                          void* d_workspace, cudaStream_t stream) {
  bool launched = false;
  return CudaDecodePartialsLaunch(plan, views, num_views, d_q, d_workspace, stream, &launched);
}

Status CudaDecodeRun(const CudaDecodePlan& plan, const PagedKvView* views, int num_views, const float* d_q,
                     void* d_workspace, PartialStatesOut out, cudaStream_t stream) {
  if (plan.shape().num_seqs > 0 && (out.out == nullptr || out.lse_log2 == nullptr)) {
    return Status::InvalidArgument("CudaDecodeRun: null output pointer");
  }
  bool launched = false;
  MINIMAKV_RETURN_IF_ERROR(CudaDecodePartialsLaunch(plan, views, num_views, d_q, d_workspace, stream, &launched));
  if (plan.shape().num_seqs == 0) return Status::Ok();
  // The merge: a dependent launch after the partial kernels (an ordinary one if no view had items).
  return CudaDecodeMergeLaunch(plan, d_workspace, out, stream, /*programmatic=*/launched);
}


bool CudaTimelineCompiled() { return MINIMAKV_CUDA_TIMELINE != 0; }

Status CudaTimelineReset(cudaStream_t stream) {
#if MINIMAKV_CUDA_TIMELINE
  void* table = nullptr;
  MINIMAKV_RETURN_IF_ERROR(CudaError(cudaGetSymbolAddress(&table, g_cta_times), "timeline table address"));
  return CudaError(cudaMemsetAsync(table, 0, sizeof(g_cta_times), stream), "timeline reset");
#else
  (void)stream;
  return Status::Unsupported("timeline probes not compiled (build with -DMINIMAKV_CUDA_TIMELINE=1)");
#endif
}

Status CudaTimelineRead(std::vector<CudaCtaTimes>* out) {
#if MINIMAKV_CUDA_TIMELINE
  out->resize(size_t(kCudaTimelineKernels) * kCudaTimelineMaxCtas);
  return CudaError(cudaMemcpyFromSymbol(out->data(), g_cta_times, sizeof(g_cta_times)), "timeline read");
#else
  out->clear();
  return Status::Unsupported("timeline probes not compiled (build with -DMINIMAKV_CUDA_TIMELINE=1)");
#endif
}

Status CudaDecodeMerge(const CudaDecodePlan& plan, void* d_workspace, PartialStatesOut out, cudaStream_t stream) {
  return CudaDecodeMergeLaunch(plan, d_workspace, out, stream, /*programmatic=*/false);
}

Status CudaDecodeMergeLaunch(const CudaDecodePlan& plan, void* d_workspace, PartialStatesOut out, cudaStream_t stream,
                             bool programmatic) {
  const CudaDecodeShape& shape = plan.shape_;
  if (shape.num_seqs == 0) return Status::Ok();
  if (d_workspace == nullptr || out.out == nullptr || out.lse_log2 == nullptr) {
    return Status::InvalidArgument("CudaDecodeMerge: null workspace or output pointer");
  }
  uint8_t* ws = static_cast<uint8_t*>(d_workspace);
  MergeParams merge{};
  merge.part_out = reinterpret_cast<const float*>(ws + plan.part_out_offset_bytes_);
  merge.part_lse = reinterpret_cast<const float*>(ws + plan.part_lse_offset_bytes_);
  merge.tq3_view = -1;
  merge.num_views = plan.num_views_;
  merge.num_seqs = shape.num_seqs;
  merge.num_q_heads = plan.rows_per_seq();
  merge.out = out.out;
  merge.lse_log2 = out.lse_log2;
  merge.rows = RowMap(shape);
  merge.signs = MakeCudaSignBits(shape.rotation_seed, shape.head_dim);
  merge.inv_sqrt_dim = float(1.0 / std::sqrt(double(shape.head_dim)));
  for (int v = 0; v < plan.num_views_; ++v) {
    merge.indptr[v] = reinterpret_cast<const int32_t*>(ws + plan.indptr_offset_bytes_[v]);
    merge.item_offset[v] = plan.item_offset_[v];
    if (plan.formats_[v] == KvFormat::kTq3) merge.tq3_view = v;
  }
  const int rows = shape.num_seqs * plan.rows_per_seq();
  // Few items per row (batch 32: 3-5): v9's kernel, one warp per row, loads each view's first 8 items in one round
  // and launches a quarter of the warps (measured v10: 8.8 vs 10.5 us at Qwen 32K b32).
  const int items_per_seq = (plan.total_items_ + shape.num_seqs - 1) / shape.num_seqs;
  if (items_per_seq > kMergeOneWarpItems) {
    const dim3 grid(static_cast<unsigned>(rows));
    const bool few = rows < kMergeFewRows;
    const dim3 block((few ? kMergeRowWarpsFewRows : kMergeRowWarpsManyRows) * kWarpSize);
    cudaError_t error;
    constexpr int kFew = kMergeRowWarpsFewRows;
    constexpr int kMany = kMergeRowWarpsManyRows;
    if (shape.head_dim == 256) {
      error = few ? LaunchKernel(MergeRowKernel<256, kFew>, grid, block, 0, stream, programmatic, merge)
                  : LaunchKernel(MergeRowKernel<256, kMany>, grid, block, 0, stream, programmatic, merge);
    } else if (shape.head_dim == 128) {
      error = few ? LaunchKernel(MergeRowKernel<128, kFew>, grid, block, 0, stream, programmatic, merge)
                  : LaunchKernel(MergeRowKernel<128, kMany>, grid, block, 0, stream, programmatic, merge);
    } else {
      error = few ? LaunchKernel(MergeRowKernel<64, kFew>, grid, block, 0, stream, programmatic, merge)
                  : LaunchKernel(MergeRowKernel<64, kMany>, grid, block, 0, stream, programmatic, merge);
    }
    return CudaError(error, "merge kernel launch");
  }
  const unsigned row_blocks = unsigned((rows + kMergeWarps - 1) / kMergeWarps);
  const dim3 grid(row_blocks);
  const dim3 block(kMergeWarps * kWarpSize);
  return CudaError(shape.head_dim == 256   ? LaunchKernel(MergeKernel<256>, grid, block, 0, stream, programmatic, merge)
                   : shape.head_dim == 128 ? LaunchKernel(MergeKernel<128>, grid, block, 0, stream, programmatic, merge)
                                           : LaunchKernel(MergeKernel<64>, grid, block, 0, stream, programmatic, merge),
                   "merge kernel launch");
}

}  // namespace minimakv
