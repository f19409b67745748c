// PagedCache: the mixed-format paged KV cache (../shared/MINIMA-KV.md parts 1-4, 7).
//
// One PagePool per format with a byte budget; per (sequence, layer) a BlockTable; a RetentionPolicy deciding
// which full pages leave the hot format. New tokens are written in `hot_format` (FP8, or BF16 for the dense
// control cache); full pages that leave the recent window and are neither anchors nor pinned are converted
// FP8 -> TQ3. No live token is ever evicted: every token of a live sequence stays decodable.
//
// Layers of CacheConfig::bf16_layers are written in BF16 instead (and never converted), whatever hot_format says.
//
// Encoding (bit-exact contract with the GPU conversion):
//   FP8 page  : Fp8EncodeVector of each (token, head) K and V vector at PageLayout offsets.
//   BF16 page : Bf16EncodeVector likewise (never converted).
//   TQ3 page  : for each (token, head): Fp8DecodeVector of the FP8 page's codes, then Tq3EncodeVector with
//               rotation() -- exactly that, nothing else.
//
// Conversion protocol (publish-then-free): build the TQ3 page completely, swap the block-table entry to
// (kTq3, new id), then drop the FP8 reference. On the CPU every call is synchronous, so no reader can still
// be using the FP8 page when its last reference goes; a caller with asynchronous readers of PoolBase()
// (a GPU runtime) must not call Append/ApplyRetention/Free while such reads are in flight.
// TQ3 pool full (or a vector whose norm overflows the fp16 TQ3 scale): the page stays FP8; Accounting()
// counts it as stale_kept_hot. ApplyRetention(seq) retries such pages.
//
// Fork and sharing: Fork shares every page (ref counts + 1). Full pages are immutable, so sharing them is
// free. A shared partly-filled last page is copied (copy-on-write) by the first owner that appends to it;
// the other owners keep the original. Conversion of a shared FP8 page honours each owner's policy: the
// owner that sees it stale converts it and keeps a map fp8 page -> tq3 page; any other owner that later
// converts the same FP8 page reuses that TQ3 page (ref count + 1) instead of building another, so a
// physical page is converted once. The map entry dies when either page is freed.
//
// Pins: Pin(seq, begin, end) marks tokens [begin, end) of every layer of `seq` as anchors (the range may
// extend past the current length, e.g. to protect a system prompt before it is appended). Pages that hold
// a pinned token are never converted from then on. A page already converted to TQ3 stays TQ3: TQ3 is lossy,
// the FP8 bytes are gone, so a pin cannot restore them. Pin before the page leaves the recent window.
// A forked child inherits its parent's pins.
//
// Thread safety: none. const methods may run concurrently with each other, not with a mutating call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "minimakv/block_table.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/kv_accounting.h"
#include "minimakv/kv_format.h"
#include "minimakv/page_layout.h"
#include "minimakv/page_pool.h"
#include "minimakv/paged_kv_view.h"
#include "minimakv/retention_policy.h"
#include "minimakv/status.h"
#include "minimakv/token_range.h"

namespace minimakv {

using SeqId = int64_t;

struct CacheConfig {
  int num_layers = 0;   // layers this cache holds (e.g. only the full-attention layers of a hybrid model)
  int kv_heads = 0;
  int head_dim = 0;     // 64, 128 or 256
  int page_tokens = 64;
  // Format new tokens are written in: kBf16 for the dense control cache, kFp8 otherwise (never kTq3).
  KvFormat hot_format = KvFormat::kFp8;
  // Byte budget per format, indexed by KvFormat; 0 = no pool of that format. The hot format needs a pool;
  // without a TQ3 pool nothing is converted.
  size_t pool_bytes[kNumKvFormats] = {0, 0, 0};
  // Layers whose tokens are written in BF16 whatever hot_format says, and never converted: layers whose keys
  // FP8 cannot carry (Qwen2.5's key-bias outlier layers, see KeyBiasOutlierLayers in llama_model.h). Indices in
  // [0, num_layers), may repeat; a nonempty list needs a BF16 pool.
  std::vector<int> bf16_layers;
  RetentionPolicy policy;
  uint64_t rotation_seed = HadamardRotation::kDefaultSeed;
};

// Owns the CSR arrays a PagedKvView points into. Reuse one across steps to avoid reallocations.
struct FormatViewStorage {
  std::vector<int32_t> page_indptr;       // [num_seqs + 1]
  std::vector<int32_t> page_ids;          // [page_indptr.back()]
  std::vector<int32_t> last_page_tokens;  // [num_seqs]; 0 for a sequence with no page of this format
};

class PagedCache {
 public:
  // InvalidArgument naming the bad field: num_layers not in [1, 65536], kv_heads <= 0, unsupported head_dim,
  // page_tokens not in [1, 65536], hot_format kTq3, no hot pool, a nonzero budget below one page, negative policy
  // windows, a hot_layers or bf16_layers entry out of range, bf16_layers without a BF16 pool.
  static Status Create(const CacheConfig& config, std::unique_ptr<PagedCache>* out);

  ~PagedCache();
  PagedCache(const PagedCache&) = delete;
  PagedCache& operator=(const PagedCache&) = delete;

  const CacheConfig& config() const { return config_; }

  // New empty sequence; ids are 0, 1, 2, ... in creation order (Fork children included), never reused.
  Status AddSequence(SeqId* id);

  // Appends num_tokens tokens to one layer of `seq`, then applies retention to that layer's pages that just
  // left the recent window. k, v: [num_tokens][kv_heads][head_dim] fp32. num_tokens == 0 is a no-op.
  // All-or-nothing: on any error (unknown seq, bad layer, null pointer, negative count, NaN/Inf in k or v,
  // hot pool too small for the new pages) the cache is unchanged and the message names the bad value
  // (for NaN/Inf: k or v, token, head and coordinate).
  Status Append(SeqId seq, int layer, const float* k, const float* v, int num_tokens);

  // New sequence `*child` sharing every page of `parent` (all layers) and its pins. Never allocates pages.
  // ResourceExhausted (the cache unchanged) when a page of `parent` already holds PagePool::kMaxPageRefs
  // references.
  Status Fork(SeqId parent, SeqId* child);

  // Drops `seq` and its references; pages whose last reference goes return to their pool's free list.
  Status Free(SeqId seq);

  // Pins tokens [begin_token, end_token) of every layer of `seq` (see the header comment for pages already
  // in TQ3). InvalidArgument unless 0 <= begin_token < end_token.
  Status Pin(SeqId seq, int64_t begin_token, int64_t end_token);

  // Converts every full page of every layer of `seq` that is stale under the policy and still in FP8
  // (including pages that stayed FP8 earlier because the TQ3 pool was full). A full TQ3 pool is not an
  // error. Append calls this automatically for the pages it pushed out of the recent window.
  Status ApplyRetention(SeqId seq);

  // Tokens of `seq` in `layer`; -1 for an unknown sequence or a layer out of range.
  int64_t SeqTokens(SeqId seq, int layer) const;
  bool HasSequence(SeqId seq) const;
  // Live sequence ids, ascending.
  std::vector<SeqId> Sequences() const;

  // The pages of `format` of `layer` for the batch `seqs` (in that order), as PagedKvView CSR arrays owned
  // by *storage: per sequence, its pages of that format in logical order, so a partly-filled last page (if
  // in this format) comes last, with last_page_tokens set; a sequence with no page of that format gets an
  // empty range. A format without a pool gives an empty view (pages == nullptr). The view stays valid
  // until the next mutating call or a change to *storage. InvalidArgument for a null storage or view.
  Status BuildFormatView(int layer, std::span<const SeqId> seqs, KvFormat format, FormatViewStorage* storage,
                         PagedKvView* view) const;

  // Dequantizes one token of one layer: k, v [kv_heads][head_dim], original (unrotated) domain.
  // For tests and references; kernels read the pages directly. InvalidArgument for a null k or v.
  Status DecodeToken(SeqId seq, int layer, int64_t token, float* k, float* v) const;

  // The rotation every TQ3 page of this cache was encoded with (from config().rotation_seed).
  const HadamardRotation& rotation() const { return rotation_; }

  // Exact accounting, recomputed from the block tables and pools on each call (O(total pages)).
  KvAccounting Accounting() const;

  // Raw pool memory for kernels: page p of format f at PoolBase(f) + p * Layout(f).page_bytes().
  // PoolBase is nullptr for a format without a pool.
  const uint8_t* PoolBase(KvFormat format) const;
  PageLayout Layout(KvFormat format) const;
  // nullptr for a format without a pool (tests, debugging).
  const PagePool* Pool(KvFormat format) const;

  // The format `layer`'s new tokens are written in: kBf16 for a layer of config().bf16_layers, else
  // config().hot_format. kFp8 for a layer out of range.
  KvFormat LayerHotFormat(int layer) const;

  // The block table of (seq, layer), or nullptr for an unknown sequence / layer out of range.
  const BlockTable* Table(SeqId seq, int layer) const;
  // The pinned ranges of `seq` (empty for an unknown sequence).
  std::vector<TokenRange> Pins(SeqId seq) const;

 private:
  struct Sequence {
    std::vector<BlockTable> layers;  // [num_layers]
    std::vector<TokenRange> pins;
  };

  PagedCache() = default;
  Status FindSequence(SeqId seq, Sequence** out);
  Status FindSequence(SeqId seq, const Sequence** out) const;
  PagePool* MutablePool(KvFormat format) { return pools_[int(format)].get(); }
  // True when logical page `page_index` holds an anchor or pinned token.
  bool IsProtected(const Sequence& sequence, size_t page_index) const;
  void ReleasePage(PageRef page);
  // Converts logical page `page_index` of `table` if stale; no-op for a page not in FP8.
  void MaybeConvert(const Sequence& sequence, BlockTable* table, size_t page_index);
  void EncodeTokens(KvFormat format, int32_t page_id, int first_slot, const float* k, const float* v,
                    int num_tokens);

  CacheConfig config_;
  HadamardRotation rotation_;
  std::unique_ptr<PagePool> pools_[kNumKvFormats];
  std::unordered_map<SeqId, Sequence> sequences_;
  SeqId next_seq_id_ = 0;
  // Conversion sharing (see the header comment): tq3_of_fp8_[fp8 page] = its TQ3 conversion or -1, and the
  // reverse map, both cleared when either page is freed.
  std::vector<int32_t> tq3_of_fp8_;
  std::vector<bool> is_hot_layer_;  // [num_layers], from RetentionPolicy::hot_layers
  std::vector<KvFormat> layer_hot_format_;  // [num_layers], from hot_format and bf16_layers
  std::vector<int32_t> fp8_of_tq3_;
};

}  // namespace minimakv
