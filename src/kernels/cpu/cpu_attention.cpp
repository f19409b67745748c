// Driver for the CPU attention kernels: validates arguments, cuts the batch into tasks (kernels/cpu/
// cpu_kernels.h), runs them on a few threads, and merges the partial states of sequences that were split over
// page ranges.
#include "minimakv/cpu_attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "minimakv/partial_state.h"
#include "minimakv/thread_pool.h"

namespace minimakv {
namespace {

// Below this many tasks per thread, sequences are split over page ranges so every thread gets work.
constexpr int kMinTasksPerThread = 4;
// A page-range split never makes ranges shorter than this many pages: shorter ones would cost more in merges
// and per-task setup (query rotation, final normalization) than they win in balance.
constexpr int kMinPagesPerSplit = 8;

std::string Where(const char* what, int64_t index, int64_t value) {
  return std::string(what) + "[" + std::to_string(index) + "] = " + std::to_string(value);
}

Status ValidateQueries(const AttentionQueries& queries) {
  if (queries.num_seqs < 0) return Status::InvalidArgument("queries.num_seqs " + std::to_string(queries.num_seqs) + " is negative");
  if (queries.num_seqs > 0 && queries.q_indptr == nullptr) return Status::InvalidArgument("queries.q_indptr is null");
  if (queries.num_q_heads <= 0) {
    return Status::InvalidArgument("queries.num_q_heads " + std::to_string(queries.num_q_heads) + " must be positive");
  }
  if (!std::isfinite(queries.sm_scale)) return Status::InvalidArgument("queries.sm_scale is not finite");
  if (queries.num_seqs > 0) {
    if (queries.q_indptr[0] != 0) return Status::InvalidArgument(Where("queries.q_indptr", 0, queries.q_indptr[0]) + ", must be 0");
    for (int s = 0; s < queries.num_seqs; ++s) {
      if (queries.q_indptr[s + 1] < queries.q_indptr[s]) {
        return Status::InvalidArgument(Where("queries.q_indptr", s + 1, queries.q_indptr[s + 1]) + " decreases");
      }
    }
    if (queries.q_indptr[queries.num_seqs] > 0 && queries.q == nullptr) return Status::InvalidArgument("queries.q is null");
  }
  return Status::Ok();
}

Status ValidateView(const PagedKvView& view, const AttentionQueries& queries, const HadamardRotation* rotation) {
  MINIMAKV_RETURN_IF_ERROR(CheckPageLayout(view.layout));
  if (view.num_seqs != queries.num_seqs) {
    return Status::InvalidArgument("view.num_seqs " + std::to_string(view.num_seqs) + " differs from queries.num_seqs " +
                                   std::to_string(queries.num_seqs));
  }
  if (queries.num_q_heads % view.layout.kv_heads != 0) {
    return Status::InvalidArgument("num_q_heads " + std::to_string(queries.num_q_heads) +
                                   " is not a multiple of kv_heads " + std::to_string(view.layout.kv_heads));
  }
  if (view.num_seqs > 0 && view.page_indptr == nullptr) return Status::InvalidArgument("view.page_indptr is null");
  if (view.layout.format == KvFormat::kTq3) {
    if (rotation == nullptr) return Status::InvalidArgument("a TQ3 view needs the Hadamard rotation, got null");
    if (rotation->head_dim() != view.layout.head_dim) {
      return Status::InvalidArgument("rotation head_dim " + std::to_string(rotation->head_dim()) +
                                     " differs from the TQ3 view's head_dim " + std::to_string(view.layout.head_dim));
    }
  }
  if (view.num_seqs == 0) return Status::Ok();
  if (view.page_indptr[0] != 0) return Status::InvalidArgument(Where("view.page_indptr", 0, view.page_indptr[0]) + ", must be 0");
  for (int s = 0; s < view.num_seqs; ++s) {
    if (view.page_indptr[s + 1] < view.page_indptr[s]) {
      return Status::InvalidArgument(Where("view.page_indptr", s + 1, view.page_indptr[s + 1]) + " decreases");
    }
  }
  const int32_t total_pages = view.page_indptr[view.num_seqs];
  if (total_pages == 0) return Status::Ok();
  if (view.pages == nullptr) return Status::InvalidArgument("view.pages is null but the view lists pages");
  if (view.page_ids == nullptr) return Status::InvalidArgument("view.page_ids is null but the view lists pages");
  if (view.last_page_tokens == nullptr) return Status::InvalidArgument("view.last_page_tokens is null");
  for (int32_t i = 0; i < total_pages; ++i) {
    if (view.page_ids[i] < 0) return Status::InvalidArgument(Where("view.page_ids", i, view.page_ids[i]) + " is negative");
  }
  for (int s = 0; s < view.num_seqs; ++s) {
    if (view.page_indptr[s + 1] == view.page_indptr[s]) continue;
    const int32_t last = view.last_page_tokens[s];
    if (last < 1 || last > view.layout.page_tokens) {
      return Status::InvalidArgument(Where("view.last_page_tokens", s, last) + ", must be in 1.." +
                                     std::to_string(view.layout.page_tokens));
    }
  }
  return Status::Ok();
}

Status ValidateOptions(const CpuAttentionOptions& options) {
  if (options.num_threads < 1 || options.num_threads > kMaxThreads) {
    return Status::InvalidArgument("options.num_threads " + std::to_string(options.num_threads) + " must be in 1.." +
                                   std::to_string(kMaxThreads));
  }
  if (options.max_task_rows < 1 || options.max_task_rows > cpu::kMaxTaskRows) {
    return Status::InvalidArgument("options.max_task_rows " + std::to_string(options.max_task_rows) + " must be in 1.." +
                                   std::to_string(cpu::kMaxTaskRows));
  }
  return Status::Ok();
}

// Threads a call runs on: its pool's, else the num_threads it asks for.
int ThreadsOf(const CpuAttentionOptions& options) {
  return options.pool != nullptr ? options.pool->num_threads() : options.num_threads;
}

// Runs fn(i) for i in [0, count) on the pool's threads (the caller's included), indices handed out in order.
template <typename Fn>
void ParallelFor(ThreadPool& pool, size_t count, const Fn& fn) {
  pool.ParallelForEach(int64_t(count), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(size_t(i));
  });
}

// A task whose rows are merged from several page ranges: the first range writes the output, the others
// scratch slots that are merged in afterwards.
struct SplitMerge {
  cpu::KernelTask primary;
  std::vector<size_t> scratch_slots;  // each slot holds kMaxTaskRows rows of (head_dim outputs + 1 lse)
};

// The tasks of one view and what merging its page-range splits needs.
struct ViewPlan {
  std::vector<cpu::KernelTask> tasks;
  std::vector<SplitMerge> merges;
  std::vector<float> scratch;
  size_t slot_floats = 0;
  int head_dim = 0;
  KvFormat format = KvFormat::kBf16;
};

// Cuts one view's work into kernel tasks (REQUIRES: arguments validated, at least one query token).
void PlanView(const PagedKvView& view, const AttentionQueries& queries, const HadamardRotation* rotation,
              const PartialStatesOut& out, const CpuAttentionOptions& options, ViewPlan* plan) {
  const int num_threads = ThreadsOf(options);
  const PageLayout& layout = view.layout;
  const int d = layout.head_dim;
  const int heads = queries.num_q_heads;
  const int group = heads / layout.kv_heads;
  // Rows of one task: whole GQA groups of consecutive query tokens while they fit, else pieces of one group;
  // how many rows each family takes is the dispatcher's (TaskRowsFor).
  const int rows_per_task = cpu::TaskRowsFor(options.family, options.force_scalar, layout.format, group, d,
                                             options.max_task_rows, options.tq3_scores);
  const float score_scale_log2 = queries.sm_scale * kLog2e;

  // Count tasks and pages to decide whether sequences must be split over page ranges.
  int64_t unsplit_tasks = 0;
  int64_t task_pages = 0;
  for (int s = 0; s < queries.num_seqs; ++s) {
    const int64_t rows = int64_t(queries.q_indptr[s + 1] - queries.q_indptr[s]) * group;
    const int64_t blocks = (rows + rows_per_task - 1) / rows_per_task;
    unsplit_tasks += blocks * layout.kv_heads;
    task_pages += blocks * layout.kv_heads * (view.page_indptr[s + 1] - view.page_indptr[s]);
  }
  int64_t pages_per_split = INT64_MAX;
  if (num_threads > 1 && unsplit_tasks < int64_t(num_threads) * kMinTasksPerThread) {
    const int64_t target_tasks = int64_t(num_threads) * kMinTasksPerThread;
    pages_per_split = std::max<int64_t>(kMinPagesPerSplit, (task_pages + target_tasks - 1) / target_tasks);
  }

  std::vector<cpu::KernelTask>& tasks = plan->tasks;
  std::vector<size_t> task_slot;  // per task: its scratch slot, or kNoSlot when it writes the output
  constexpr size_t kNoSlot = SIZE_MAX;
  std::vector<SplitMerge>& merges = plan->merges;
  size_t scratch_slots = 0;
  for (int s = 0; s < queries.num_seqs; ++s) {
    const int q_begin = queries.q_indptr[s];
    const int64_t rows = int64_t(queries.q_indptr[s + 1] - q_begin) * group;
    const int32_t page_begin = view.page_indptr[s];
    const int32_t num_pages = view.page_indptr[s + 1] - page_begin;
    for (int h = 0; h < layout.kv_heads; ++h) {
      for (int64_t row0 = 0; row0 < rows; row0 += rows_per_task) {
        cpu::KernelTask task;
        task.view = &view;
        task.kv_head = h;
        task.num_rows = int(std::min<int64_t>(rows_per_task, rows - row0));
        task.score_scale_log2 = score_scale_log2;
        task.rotation = rotation;
        for (int r = 0; r < task.num_rows; ++r) {
          const int64_t row = row0 + r;
          const int64_t token = q_begin + row / group;
          const int64_t head = int64_t(h) * group + row % group;
          task.q_rows[r] = queries.q + (token * heads + head) * d;
          task.out_rows[r] = out.out + (token * heads + head) * d;
          task.lse_rows[r] = out.lse_log2 + token * heads + head;
        }
        const int64_t splits = num_pages <= pages_per_split ? 1 : (num_pages + pages_per_split - 1) / pages_per_split;
        SplitMerge merge;
        for (int64_t split = 0; split < splits; ++split) {
          cpu::KernelTask part = task;
          const int64_t first = split * num_pages / splits;
          const int64_t last = (split + 1) * num_pages / splits;
          part.page_ids = view.page_ids + page_begin + first;
          part.num_pages = int(last - first);
          part.last_page_tokens = last == num_pages ? view.last_page_tokens[s] : layout.page_tokens;
          if (split == 0) {
            merge.primary = part;
          } else {
            merge.scratch_slots.push_back(scratch_slots);
          }
          tasks.push_back(part);
          // Non-first ranges write scratch slots, patched in once the scratch buffer exists (below).
          task_slot.push_back(split == 0 ? kNoSlot : scratch_slots++);
        }
        if (splits > 1) merges.push_back(std::move(merge));
      }
    }
  }

  // Point the non-first page ranges of split tasks at their scratch slots.
  const size_t slot_floats = size_t(cpu::kMaxTaskRows) * (size_t(d) + 1);
  plan->slot_floats = slot_floats;
  plan->head_dim = d;
  plan->format = layout.format;
  std::vector<float>& scratch = plan->scratch;
  scratch.assign(scratch_slots * slot_floats, 0.0f);
  for (size_t t = 0; t < tasks.size(); ++t) {
    if (task_slot[t] == kNoSlot) continue;
    float* slot = scratch.data() + task_slot[t] * slot_floats;
    for (int r = 0; r < tasks[t].num_rows; ++r) {
      tasks[t].out_rows[r] = slot + size_t(r) * d;
      tasks[t].lse_rows[r] = slot + size_t(cpu::kMaxTaskRows) * d + r;
    }
  }
}

// The kernels the dispatcher chose for a view of `format` and `head_dim`, per task rows: [rows - 1].
using RowKernels = std::array<cpu::KernelFn, cpu::kMaxTaskRows>;
RowKernels KernelsOf(const CpuAttentionOptions& options, KvFormat format, int head_dim) {
  RowKernels kernels;
  for (int rows = 1; rows <= cpu::kMaxTaskRows; ++rows) {
    kernels[size_t(rows - 1)] = cpu::SelectKernel(options, format, rows, head_dim);
  }
  return kernels;
}

// Runs the tasks of all plans in one parallel region, then merges page-range splits.
void RunPlans(std::span<ViewPlan> plans, const CpuAttentionOptions& options) {
  std::vector<std::pair<size_t, size_t>> work;  // (plan, task)
  std::vector<std::pair<size_t, size_t>> merges;  // (plan, merge)
  for (size_t p = 0; p < plans.size(); ++p) {
    for (size_t t = 0; t < plans[p].tasks.size(); ++t) work.emplace_back(p, t);
    for (size_t m = 0; m < plans[p].merges.size(); ++m) merges.emplace_back(p, m);
  }
  // Longest tasks first (pages x rows), so the threads' last tasks are short ones: with mixed views (a Minima
  // step has a few short FP8 tasks beside long TQ3 ones) the short tasks fill in at the end instead of a long
  // one running alone. The order does not change any result: each task writes its own rows.
  auto task_cost = [&](const std::pair<size_t, size_t>& w) {
    const cpu::KernelTask& t = plans[w.first].tasks[w.second];
    return int64_t(t.num_pages) * t.num_rows;
  };
  std::stable_sort(work.begin(), work.end(), [&](const auto& a, const auto& b) { return task_cost(a) > task_cost(b); });
  std::vector<RowKernels> kernels;  // per plan: the family chosen for its view's format and head_dim, per rows
  for (const ViewPlan& plan : plans) kernels.push_back(KernelsOf(options, plan.format, plan.head_dim));
  // The caller's pool, else one for this call and both passes, no larger than the task count (no threads are
  // kept between calls without a pool; each started worker costs ~37 us, docs/cpu-notes.md).
  std::optional<ThreadPool> call_pool;
  if (options.pool == nullptr) {
    call_pool.emplace(int(std::min<size_t>(size_t(options.num_threads), std::max<size_t>(work.size(), 1))));
  }
  ThreadPool& pool = options.pool != nullptr ? *options.pool : *call_pool;
  ParallelFor(pool, work.size(), [&](size_t i) {
    const cpu::KernelTask& task = plans[work[i].first].tasks[work[i].second];
    kernels[work[i].first][size_t(std::max(task.num_rows, 1) - 1)](task);
  });
  ParallelFor(pool, merges.size(), [&](size_t i) {
    const ViewPlan& plan = plans[merges[i].first];
    const SplitMerge& merge = plan.merges[merges[i].second];
    const int d = plan.head_dim;
    for (size_t slot_index : merge.scratch_slots) {
      const float* slot = plan.scratch.data() + slot_index * plan.slot_floats;
      for (int r = 0; r < merge.primary.num_rows; ++r) {
        MergePartialState(merge.primary.out_rows[r], merge.primary.lse_rows[r], slot + size_t(r) * d,
                          slot[size_t(cpu::kMaxTaskRows) * d + r], d);
      }
    }
  });
}

// Rows of the first task of a decode with `group` query heads per KV head (one query token per sequence).
int DecodeTaskRows(const CpuAttentionOptions& options, KvFormat format, int group, int head_dim) {
  return std::min(group, cpu::TaskRowsFor(options.family, options.force_scalar, format, group, head_dim,
                                          options.max_task_rows, options.tq3_scores));
}

}  // namespace

const char* CpuKernelIsaFor(const CpuAttentionOptions& options, KvFormat format, int group, int head_dim) {
  const int rows = DecodeTaskRows(options, format, group, head_dim);
  return cpu::IsaName(cpu::SelectIsa(options.family, options.force_scalar, format, rows, head_dim, options.tq3_scores));
}

const char* CpuTq3ScoresFor(const CpuAttentionOptions& options, int group, int head_dim) {
  const KvFormat tq3 = KvFormat::kTq3;
  const int rows = DecodeTaskRows(options, tq3, group, head_dim);
  if (cpu::SelectIsa(options.family, options.force_scalar, tq3, rows, head_dim, options.tq3_scores) != cpu::CpuIsa::kAmx) {
    return "";
  }
  // The kernel the dispatcher picks (SelectKernel) says which score variant runs.
  const cpu::KernelFn kernel = cpu::SelectKernel(options, tq3, rows, head_dim);
  return kernel == &cpu::AttendAmxTq3Int8 || kernel == &cpu::AttendAmxTq3Int8Values ? "int8" : "bf16";
}

const char* CpuTq3ValuesFor(const CpuAttentionOptions& options, int group, int head_dim) {
  const KvFormat tq3 = KvFormat::kTq3;
  const int rows = DecodeTaskRows(options, tq3, group, head_dim);
  if (cpu::SelectIsa(options.family, options.force_scalar, tq3, rows, head_dim, options.tq3_scores) != cpu::CpuIsa::kAmx) {
    return "";
  }
  return cpu::SelectKernel(options, tq3, rows, head_dim) == &cpu::AttendAmxTq3Int8Values ? "int8" : "bf16";
}

const char* CpuKernelIsaFor(const CpuAttentionOptions& options, KvFormat format) {
  return CpuKernelIsaFor(options, format, kLlamaDecodeGroup, kLlamaHeadDim);
}

const char* CpuKernelIsa(const CpuAttentionOptions& options) {
  const char* first = CpuKernelIsaFor(options, KvFormat::kBf16);
  for (KvFormat format : {KvFormat::kFp8, KvFormat::kTq3}) {
    if (std::string(CpuKernelIsaFor(options, format)) != first) return "amx+avx512";
  }
  return first;
}

Status ComputePartialStatesCpu(const PagedKvView& view, const AttentionQueries& queries,
                               const HadamardRotation* rotation, const PartialStatesOut& out,
                               const CpuAttentionOptions& options) {
  MINIMAKV_RETURN_IF_ERROR(ValidateQueries(queries));
  MINIMAKV_RETURN_IF_ERROR(ValidateView(view, queries, rotation));
  MINIMAKV_RETURN_IF_ERROR(ValidateOptions(options));
  if (queries.num_seqs == 0 || queries.q_indptr[queries.num_seqs] == 0) return Status::Ok();
  if (out.out == nullptr || out.lse_log2 == nullptr) return Status::InvalidArgument("out.out or out.lse_log2 is null");
  ViewPlan plan;
  PlanView(view, queries, rotation, out, options, &plan);
  RunPlans({&plan, 1}, options);
  return Status::Ok();
}

Status MergePartialStatesCpu(std::span<float* const> outs, std::span<float* const> lse_log2s, int64_t rows,
                             int head_dim) {
  if (outs.size() != lse_log2s.size()) {
    return Status::InvalidArgument("MergePartialStatesCpu got " + std::to_string(outs.size()) + " outputs but " +
                                   std::to_string(lse_log2s.size()) + " lse arrays");
  }
  if (rows < 0 || head_dim <= 0) {
    return Status::InvalidArgument("MergePartialStatesCpu: rows " + std::to_string(rows) + ", head_dim " +
                                   std::to_string(head_dim));
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i] == nullptr || lse_log2s[i] == nullptr) {
      return Status::InvalidArgument("MergePartialStatesCpu: state set " + std::to_string(i) + " is null");
    }
  }
  for (size_t i = 1; i < outs.size(); ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      MergePartialState(outs[0] + r * head_dim, lse_log2s[0] + r, outs[i] + r * head_dim, lse_log2s[i][r], head_dim);
    }
  }
  return Status::Ok();
}

Status AttendMixedCpu(std::span<const PagedKvView> views, const AttentionQueries& queries,
                      const HadamardRotation* rotation, float* out, float* lse_log2,
                      const CpuAttentionOptions& options) {
  MINIMAKV_RETURN_IF_ERROR(ValidateQueries(queries));
  if (views.empty()) return Status::InvalidArgument("AttendMixedCpu needs at least one view");
  for (size_t i = 1; i < views.size(); ++i) {
    if (views[i].layout.kv_heads != views[0].layout.kv_heads || views[i].layout.head_dim != views[0].layout.head_dim) {
      return Status::InvalidArgument("view " + std::to_string(i) + " has kv_heads " +
                                     std::to_string(views[i].layout.kv_heads) + " / head_dim " +
                                     std::to_string(views[i].layout.head_dim) + ", view 0 has " +
                                     std::to_string(views[0].layout.kv_heads) + " / " +
                                     std::to_string(views[0].layout.head_dim));
    }
  }
  const int64_t total_q = queries.num_seqs == 0 ? 0 : queries.q_indptr[queries.num_seqs];
  if (total_q == 0) return Status::Ok();
  if (out == nullptr) return Status::InvalidArgument("AttendMixedCpu: out is null");
  const int d = views[0].layout.head_dim;
  const int64_t rows = total_q * queries.num_q_heads;
  std::vector<float> own_lse;
  float* lse = lse_log2;
  if (lse == nullptr) {
    own_lse.resize(size_t(rows));
    lse = own_lse.data();
  }
  for (const PagedKvView& view : views) MINIMAKV_RETURN_IF_ERROR(ValidateView(view, queries, rotation));
  MINIMAKV_RETURN_IF_ERROR(ValidateOptions(options));
  // View 0 writes the output; the others write their own state sets, merged in afterwards. All views' tasks
  // run in one parallel region (one fork/join per call, small views balance against large ones).
  std::vector<std::vector<float>> part_out(views.size() - 1, std::vector<float>(size_t(rows) * d));
  std::vector<std::vector<float>> part_lse(views.size() - 1, std::vector<float>(size_t(rows)));
  std::vector<ViewPlan> plans(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    const PartialStatesOut states = i == 0 ? PartialStatesOut{out, lse}
                                           : PartialStatesOut{part_out[i - 1].data(), part_lse[i - 1].data()};
    PlanView(views[i], queries, rotation, states, options, &plans[i]);
  }
  RunPlans(plans, options);
  for (size_t i = 1; i < views.size(); ++i) {
    float* const outs[] = {out, part_out[i - 1].data()};
    float* const lses[] = {lse, part_lse[i - 1].data()};
    MINIMAKV_RETURN_IF_ERROR(MergePartialStatesCpu(outs, lses, rows, d));
  }
  return Status::Ok();
}

}  // namespace minimakv
