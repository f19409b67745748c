#include "minimakv/paged_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "minimakv/bf16_codec.h"
#include "minimakv/fp8_codec.h"
#include "minimakv/page_layout.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {
namespace {

// Far beyond any model's layer count; every sequence holds a block table per layer.
constexpr int kMaxLayers = 65536;

std::string FormatName(KvFormat format) { return std::string(KvFormatName(format)); }

// Names the first non-finite value of x: [num_tokens][kv_heads][head_dim].
Status CheckFiniteTokens(const float* x, const char* what, int num_tokens, int kv_heads, int head_dim) {
  const size_t total = size_t(num_tokens) * kv_heads * head_dim;
  for (size_t i = 0; i < total; ++i) {
    if (!std::isfinite(x[i])) {
      const size_t token = i / (size_t(kv_heads) * head_dim);
      const size_t head = i / head_dim % kv_heads;
      const size_t coordinate = i % head_dim;
      return Status::InvalidArgument(std::string(what) + "[token " + std::to_string(token) + "][head " +
                                     std::to_string(head) + "][coordinate " + std::to_string(coordinate) +
                                     "] is " + (std::isnan(x[i]) ? "NaN" : "Inf") +
                                     "; nothing was appended");
    }
  }
  return Status::Ok();
}

}  // namespace

Status PagedCache::Create(const CacheConfig& config, std::unique_ptr<PagedCache>* out) {
  if (config.num_layers <= 0 || config.num_layers > kMaxLayers) {
    return Status::InvalidArgument("CacheConfig.num_layers = " + std::to_string(config.num_layers) +
                                   " must be in [1, " + std::to_string(kMaxLayers) + "]");
  }
  if (config.kv_heads <= 0) {
    return Status::InvalidArgument("CacheConfig.kv_heads = " + std::to_string(config.kv_heads) + " must be > 0");
  }
  MINIMAKV_RETURN_IF_ERROR(CheckHeadDim(config.head_dim));
  if (config.page_tokens < 1 || config.page_tokens > kMaxPageTokens) {
    return Status::InvalidArgument("CacheConfig.page_tokens = " + std::to_string(config.page_tokens) +
                                   " must be in [1, " + std::to_string(kMaxPageTokens) + "]");
  }
  if (config.hot_format != KvFormat::kFp8 && config.hot_format != KvFormat::kBf16) {
    return Status::InvalidArgument("CacheConfig.hot_format = " + FormatName(config.hot_format) +
                                   " must be fp8 or bf16 (new tokens are never written in tq3)");
  }
  if (config.policy.recent_tokens < 0) {
    return Status::InvalidArgument("RetentionPolicy.recent_tokens = " + std::to_string(config.policy.recent_tokens) +
                                   " must be >= 0");
  }
  if (config.policy.anchor_tokens < 0) {
    return Status::InvalidArgument("RetentionPolicy.anchor_tokens = " + std::to_string(config.policy.anchor_tokens) +
                                   " must be >= 0");
  }
  for (int layer : config.policy.hot_layers) {
    if (layer < 0 || layer >= config.num_layers) {
      return Status::InvalidArgument("RetentionPolicy.hot_layers entry " + std::to_string(layer) +
                                     " is outside [0, " + std::to_string(config.num_layers) + ")");
    }
  }
  for (int layer : config.bf16_layers) {
    if (layer < 0 || layer >= config.num_layers) {
      return Status::InvalidArgument("CacheConfig.bf16_layers entry " + std::to_string(layer) + " is outside [0, " +
                                     std::to_string(config.num_layers) + ")");
    }
  }
  if (!config.bf16_layers.empty() && config.pool_bytes[int(KvFormat::kBf16)] == 0) {
    return Status::InvalidArgument("CacheConfig.bf16_layers lists layer " + std::to_string(config.bf16_layers[0]) +
                                   " but pool_bytes[bf16] = 0: BF16 layers need a BF16 pool");
  }
  // The hot format needs a pool unless every layer is a BF16 layer.
  std::vector<KvFormat> layer_hot_format(size_t(config.num_layers), config.hot_format);
  for (int layer : config.bf16_layers) layer_hot_format[size_t(layer)] = KvFormat::kBf16;
  if (config.pool_bytes[int(config.hot_format)] == 0 &&
      std::find(layer_hot_format.begin(), layer_hot_format.end(), config.hot_format) != layer_hot_format.end()) {
    return Status::InvalidArgument("CacheConfig.pool_bytes[" + FormatName(config.hot_format) +
                                   "] = 0: the hot format needs a pool");
  }
  std::unique_ptr<PagedCache> cache(new PagedCache());
  cache->config_ = config;
  cache->layer_hot_format_ = std::move(layer_hot_format);
  cache->is_hot_layer_.assign(size_t(config.num_layers), false);
  for (int layer : config.policy.hot_layers) cache->is_hot_layer_[size_t(layer)] = true;
  MINIMAKV_RETURN_IF_ERROR(HadamardRotation::Create(config.head_dim, config.rotation_seed, &cache->rotation_));
  for (int f = 0; f < kNumKvFormats; ++f) {
    if (config.pool_bytes[f] == 0) continue;
    MINIMAKV_RETURN_IF_ERROR(PagePool::Create(cache->Layout(KvFormat(f)), config.pool_bytes[f], &cache->pools_[f]));
  }
  if (const PagePool* fp8 = cache->Pool(KvFormat::kFp8)) cache->tq3_of_fp8_.assign(size_t(fp8->capacity_pages()), -1);
  if (const PagePool* tq3 = cache->Pool(KvFormat::kTq3)) cache->fp8_of_tq3_.assign(size_t(tq3->capacity_pages()), -1);
  *out = std::move(cache);
  return Status::Ok();
}

PagedCache::~PagedCache() = default;

Status PagedCache::FindSequence(SeqId seq, Sequence** out) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return Status::NotFound("unknown sequence id " + std::to_string(seq));
  *out = &it->second;
  return Status::Ok();
}

Status PagedCache::FindSequence(SeqId seq, const Sequence** out) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return Status::NotFound("unknown sequence id " + std::to_string(seq));
  *out = &it->second;
  return Status::Ok();
}

Status PagedCache::AddSequence(SeqId* id) {
  Sequence sequence;
  sequence.layers.resize(size_t(config_.num_layers));
  *id = next_seq_id_++;
  sequences_.emplace(*id, std::move(sequence));
  return Status::Ok();
}

KvFormat PagedCache::LayerHotFormat(int layer) const {
  if (layer < 0 || layer >= config_.num_layers) return KvFormat::kFp8;
  return layer_hot_format_[size_t(layer)];
}

void PagedCache::EncodeTokens(KvFormat format, int32_t page_id, int first_slot, const float* k, const float* v,
                              int num_tokens) {
  const PageLayout layout = Layout(format);
  uint8_t* page = MutablePool(format)->page_data(page_id);
  const int d = config_.head_dim;
  for (int t = 0; t < num_tokens; ++t) {
    const int slot = first_slot + t;
    for (int h = 0; h < config_.kv_heads; ++h) {
      const size_t src = (size_t(t) * config_.kv_heads + h) * d;
      if (format == KvFormat::kFp8) {
        float k_scale = 0.0f;
        float v_scale = 0.0f;
        // Inputs were checked finite by Append, the only failure these encoders report.
        (void)Fp8EncodeVector(k + src, d, page + layout.k_codes_offset(h, slot), &k_scale);
        (void)Fp8EncodeVector(v + src, d, page + layout.v_codes_offset(h, slot), &v_scale);
        std::memcpy(page + layout.k_scale_offset(h, slot), &k_scale, sizeof(float));
        std::memcpy(page + layout.v_scale_offset(h, slot), &v_scale, sizeof(float));
      } else {
        (void)Bf16EncodeVector(k + src, d, reinterpret_cast<uint16_t*>(page + layout.k_codes_offset(h, slot)));
        (void)Bf16EncodeVector(v + src, d, reinterpret_cast<uint16_t*>(page + layout.v_codes_offset(h, slot)));
      }
    }
  }
}

Status PagedCache::Append(SeqId seq, int layer, const float* k, const float* v, int num_tokens) {
  Sequence* sequence = nullptr;
  MINIMAKV_RETURN_IF_ERROR(FindSequence(seq, &sequence));
  if (layer < 0 || layer >= config_.num_layers) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range [0, " +
                                   std::to_string(config_.num_layers) + ")");
  }
  if (num_tokens < 0) return Status::InvalidArgument("num_tokens = " + std::to_string(num_tokens) + " must be >= 0");
  if (num_tokens == 0) return Status::Ok();
  if (k == nullptr || v == nullptr) {
    return Status::InvalidArgument(std::string(k == nullptr ? "k" : "v") + " is null for " +
                                   std::to_string(num_tokens) + " tokens");
  }
  MINIMAKV_RETURN_IF_ERROR(CheckFiniteTokens(k, "k", num_tokens, config_.kv_heads, config_.head_dim));
  MINIMAKV_RETURN_IF_ERROR(CheckFiniteTokens(v, "v", num_tokens, config_.kv_heads, config_.head_dim));

  BlockTable& table = sequence->layers[size_t(layer)];
  const KvFormat hot_format = layer_hot_format_[size_t(layer)];
  PagePool* hot = MutablePool(hot_format);
  const int page_tokens = config_.page_tokens;
  const int64_t old_tokens = table.num_tokens;
  const int64_t new_tokens = old_tokens + num_tokens;
  const int first_slot = int(old_tokens % page_tokens);
  // A partly-filled last page is always in the hot format (only full pages are converted).
  const bool copy_on_write = first_slot != 0 && hot->ref_count(table.pages.back().page_id) > 1;
  const int64_t new_pages = (new_tokens + page_tokens - 1) / page_tokens - int64_t(table.pages.size());
  const int64_t needed_pages = new_pages + (copy_on_write ? 1 : 0);
  if (needed_pages > hot->free_pages()) {
    return Status::ResourceExhausted(
        FormatName(hot_format) + " pool full: appending " + std::to_string(num_tokens) +
        " tokens to sequence " + std::to_string(seq) + " layer " + std::to_string(layer) + " needs " +
        std::to_string(needed_pages) + " pages, " + std::to_string(hot->free_pages()) + " of " +
        std::to_string(hot->capacity_pages()) + " are free; nothing was appended");
  }
  // From here on nothing can fail: every page we need is available.
  if (copy_on_write) {
    int32_t copy = -1;
    (void)hot->Allocate(&copy);
    const PageRef shared = table.pages.back();
    std::memcpy(hot->page_data(copy), hot->page_data(shared.page_id), hot->page_bytes());
    table.pages.back() = PageRef{hot_format, copy};
    ReleasePage(shared);  // still referenced by another owner, so not freed
  }
  int written = 0;
  while (written < num_tokens) {
    const int64_t position = old_tokens + written;
    const int slot = int(position % page_tokens);
    if (slot == 0) {
      int32_t page = -1;
      (void)hot->Allocate(&page);
      table.pages.push_back(PageRef{hot_format, page});
    }
    const int count = std::min(num_tokens - written, page_tokens - slot);
    const size_t offset = size_t(written) * config_.kv_heads * config_.head_dim;
    EncodeTokens(hot_format, table.pages.back().page_id, slot, k + offset, v + offset, count);
    written += count;
    table.num_tokens += count;
  }
  // Retention for the pages this append pushed out of the recent window.
  const size_t begin = size_t(StalePageEnd(config_.policy, page_tokens, old_tokens));
  const size_t end = size_t(StalePageEnd(config_.policy, page_tokens, new_tokens));
  for (size_t index = begin; index < end; ++index) MaybeConvert(*sequence, &table, index);
  return Status::Ok();
}

Status PagedCache::Fork(SeqId parent, SeqId* child) {
  const Sequence* source = nullptr;
  MINIMAKV_RETURN_IF_ERROR(FindSequence(parent, &source));
  // All-or-nothing: check every page can take one more reference before taking any (a page appears once in a
  // sequence's tables, so one check per page suffices).
  for (const BlockTable& table : source->layers) {
    for (const PageRef& page : table.pages) {
      if (MutablePool(page.format)->ref_count(page.page_id) == PagePool::kMaxPageRefs) {
        return Status::ResourceExhausted("Fork of sequence " + std::to_string(parent) + ": its " +
                                         std::string(KvFormatName(page.format)) + " page " +
                                         std::to_string(page.page_id) + " already holds " +
                                         std::to_string(PagePool::kMaxPageRefs) + " references");
      }
    }
  }
  Sequence copy = *source;
  for (const BlockTable& table : copy.layers) {
    for (const PageRef& page : table.pages) MINIMAKV_RETURN_IF_ERROR(MutablePool(page.format)->AddRef(page.page_id));
  }
  *child = next_seq_id_++;
  sequences_.emplace(*child, std::move(copy));
  return Status::Ok();
}

void PagedCache::ReleasePage(PageRef page) {
  bool freed = false;
  (void)MutablePool(page.format)->Release(page.page_id, &freed);
  if (!freed) return;
  // A freed page id will be reused: forget any conversion pairing it took part in.
  if (page.format == KvFormat::kFp8 && !tq3_of_fp8_.empty()) {
    int32_t& tq3 = tq3_of_fp8_[size_t(page.page_id)];
    if (tq3 >= 0) fp8_of_tq3_[size_t(tq3)] = -1;
    tq3 = -1;
  } else if (page.format == KvFormat::kTq3 && !fp8_of_tq3_.empty()) {
    int32_t& fp8 = fp8_of_tq3_[size_t(page.page_id)];
    if (fp8 >= 0) tq3_of_fp8_[size_t(fp8)] = -1;
    fp8 = -1;
  }
}

Status PagedCache::Free(SeqId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return Status::NotFound("unknown sequence id " + std::to_string(seq));
  for (const BlockTable& table : it->second.layers) {
    for (const PageRef& page : table.pages) ReleasePage(page);
  }
  sequences_.erase(it);
  return Status::Ok();
}

Status PagedCache::Pin(SeqId seq, int64_t begin_token, int64_t end_token) {
  Sequence* sequence = nullptr;
  MINIMAKV_RETURN_IF_ERROR(FindSequence(seq, &sequence));
  if (begin_token < 0 || end_token <= begin_token) {
    return Status::InvalidArgument("pin range [" + std::to_string(begin_token) + ", " + std::to_string(end_token) +
                                   ") of sequence " + std::to_string(seq) + " must satisfy 0 <= begin < end");
  }
  sequence->pins.push_back(TokenRange{begin_token, end_token});
  return Status::Ok();
}

bool PagedCache::IsProtected(const Sequence& sequence, size_t page_index) const {
  return IsAnchorPage(config_.policy, config_.page_tokens, int64_t(page_index), sequence.pins);
}

void PagedCache::MaybeConvert(const Sequence& sequence, BlockTable* table, size_t page_index) {
  PageRef& entry = table->pages[page_index];
  if (entry.format != KvFormat::kFp8 || !config_.policy.convert_stale_to_tq3) return;
  if (is_hot_layer_[size_t(table - sequence.layers.data())]) return;
  PagePool* tq3_pool = MutablePool(KvFormat::kTq3);
  if (tq3_pool == nullptr) return;
  if (int64_t(page_index) >= StalePageEnd(config_.policy, config_.page_tokens, table->num_tokens)) return;
  if (IsProtected(sequence, page_index)) return;

  const PageRef source = entry;
  int32_t converted = tq3_of_fp8_[size_t(source.page_id)];
  if (converted >= 0) {
    // Another owner already converted this physical page: share its TQ3 page (if it can take one more
    // reference; else this owner's page stays FP8, as with a full TQ3 pool).
    if (!tq3_pool->AddRef(converted).ok()) return;
  } else {
    if (tq3_pool->free_pages() == 0) return;  // stays FP8: accounting counts it as stale_kept_hot
    (void)tq3_pool->Allocate(&converted);
    const PageLayout from = Layout(KvFormat::kFp8);
    const PageLayout to = Layout(KvFormat::kTq3);
    const uint8_t* src = MutablePool(KvFormat::kFp8)->page_data(source.page_id);
    uint8_t* dst = tq3_pool->page_data(converted);
    float decoded[256];
    for (int h = 0; h < config_.kv_heads; ++h) {
      for (int slot = 0; slot < config_.page_tokens; ++slot) {
        for (int part = 0; part < 2; ++part) {  // K, then V
          const size_t codes_from = part == 0 ? from.k_codes_offset(h, slot) : from.v_codes_offset(h, slot);
          const size_t scale_from = part == 0 ? from.k_scale_offset(h, slot) : from.v_scale_offset(h, slot);
          const size_t codes_to = part == 0 ? to.k_codes_offset(h, slot) : to.v_codes_offset(h, slot);
          const size_t scale_to = part == 0 ? to.k_scale_offset(h, slot) : to.v_scale_offset(h, slot);
          float scale = 0.0f;
          std::memcpy(&scale, src + scale_from, sizeof(float));
          Fp8DecodeVector(src + codes_from, scale, config_.head_dim, decoded);
          uint16_t scale_fp16 = 0;
          if (!Tq3EncodeVector(rotation_, decoded, dst + codes_to, &scale_fp16).ok()) {
            // Norm beyond the fp16 scale range: keep the FP8 page (counted as stale_kept_hot).
            ReleasePage(PageRef{KvFormat::kTq3, converted});
            return;
          }
          std::memcpy(dst + scale_to, &scale_fp16, sizeof(uint16_t));
        }
      }
    }
  }
  // Publish, then free: the table points at the complete TQ3 page before the FP8 reference goes.
  entry = PageRef{KvFormat::kTq3, converted};
  if (MutablePool(KvFormat::kFp8)->ref_count(source.page_id) > 1) {
    tq3_of_fp8_[size_t(source.page_id)] = converted;
    fp8_of_tq3_[size_t(converted)] = source.page_id;
  }
  ReleasePage(source);
}

Status PagedCache::ApplyRetention(SeqId seq) {
  Sequence* sequence = nullptr;
  MINIMAKV_RETURN_IF_ERROR(FindSequence(seq, &sequence));
  for (BlockTable& table : sequence->layers) {
    const size_t end = size_t(StalePageEnd(config_.policy, config_.page_tokens, table.num_tokens));
    for (size_t index = 0; index < end; ++index) MaybeConvert(*sequence, &table, index);
  }
  return Status::Ok();
}

int64_t PagedCache::SeqTokens(SeqId seq, int layer) const {
  const BlockTable* table = Table(seq, layer);
  return table == nullptr ? -1 : table->num_tokens;
}

bool PagedCache::HasSequence(SeqId seq) const { return sequences_.count(seq) != 0; }

std::vector<SeqId> PagedCache::Sequences() const {
  std::vector<SeqId> ids;
  ids.reserve(sequences_.size());
  for (const auto& [id, sequence] : sequences_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

const BlockTable* PagedCache::Table(SeqId seq, int layer) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || layer < 0 || layer >= config_.num_layers) return nullptr;
  return &it->second.layers[size_t(layer)];
}

std::vector<TokenRange> PagedCache::Pins(SeqId seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? std::vector<TokenRange>{} : it->second.pins;
}

Status PagedCache::BuildFormatView(int layer, std::span<const SeqId> seqs, KvFormat format,
                                   FormatViewStorage* storage, PagedKvView* view) const {
  if (layer < 0 || layer >= config_.num_layers) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range [0, " +
                                   std::to_string(config_.num_layers) + ")");
  }
  if (storage == nullptr || view == nullptr) {
    return Status::InvalidArgument(std::string(storage == nullptr ? "storage" : "view") + " is null");
  }
  if (int(format) >= kNumKvFormats) {
    return Status::InvalidArgument("format " + std::to_string(int(format)) + " is not a KvFormat");
  }
  for (SeqId seq : seqs) {
    if (!HasSequence(seq)) return Status::NotFound("unknown sequence id " + std::to_string(seq));
  }
  storage->page_indptr.assign(1, 0);
  storage->page_ids.clear();
  storage->last_page_tokens.clear();
  for (SeqId seq : seqs) {
    const BlockTable& table = *Table(seq, layer);
    int32_t last_tokens = 0;
    for (size_t index = 0; index < table.pages.size(); ++index) {
      if (table.pages[index].format != format) continue;
      storage->page_ids.push_back(table.pages[index].page_id);
      last_tokens = table.ValidTokens(index, config_.page_tokens);
    }
    storage->page_indptr.push_back(int32_t(storage->page_ids.size()));
    storage->last_page_tokens.push_back(last_tokens);
  }
  view->layout = Layout(format);
  view->pages = PoolBase(format);
  view->num_seqs = int(seqs.size());
  view->page_indptr = storage->page_indptr.data();
  view->page_ids = storage->page_ids.data();
  view->last_page_tokens = storage->last_page_tokens.data();
  return Status::Ok();
}

Status PagedCache::DecodeToken(SeqId seq, int layer, int64_t token, float* k, float* v) const {
  const Sequence* sequence = nullptr;
  MINIMAKV_RETURN_IF_ERROR(FindSequence(seq, &sequence));
  if (layer < 0 || layer >= config_.num_layers) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range [0, " +
                                   std::to_string(config_.num_layers) + ")");
  }
  if (k == nullptr || v == nullptr) return Status::InvalidArgument(std::string(k == nullptr ? "k" : "v") + " is null");
  const BlockTable& table = sequence->layers[size_t(layer)];
  if (token < 0 || token >= table.num_tokens) {
    return Status::InvalidArgument("token " + std::to_string(token) + " out of range [0, " +
                                   std::to_string(table.num_tokens) + ") of sequence " + std::to_string(seq) +
                                   " layer " + std::to_string(layer));
  }
  const PageRef page = table.pages[size_t(token / config_.page_tokens)];
  const int slot = int(token % config_.page_tokens);
  const PageLayout layout = Layout(page.format);
  const uint8_t* data = Pool(page.format)->page_data(page.page_id);
  const int d = config_.head_dim;
  for (int h = 0; h < config_.kv_heads; ++h) {
    for (int part = 0; part < 2; ++part) {
      float* out = (part == 0 ? k : v) + size_t(h) * d;
      const uint8_t* codes = data + (part == 0 ? layout.k_codes_offset(h, slot) : layout.v_codes_offset(h, slot));
      const uint8_t* scale = data + (part == 0 ? layout.k_scale_offset(h, slot) : layout.v_scale_offset(h, slot));
      switch (page.format) {
        case KvFormat::kBf16:
          Bf16DecodeVector(reinterpret_cast<const uint16_t*>(codes), d, out);
          break;
        case KvFormat::kFp8: {
          float s = 0.0f;
          std::memcpy(&s, scale, sizeof(float));
          Fp8DecodeVector(codes, s, d, out);
          break;
        }
        case KvFormat::kTq3: {
          uint16_t s = 0;
          std::memcpy(&s, scale, sizeof(uint16_t));
          Tq3DecodeVector(rotation_, codes, s, out);
          break;
        }
      }
    }
  }
  return Status::Ok();
}

const uint8_t* PagedCache::PoolBase(KvFormat format) const {
  const PagePool* pool = Pool(format);
  return pool == nullptr ? nullptr : pool->base();
}

PageLayout PagedCache::Layout(KvFormat format) const {
  PageLayout layout;
  layout.format = format;
  layout.kv_heads = config_.kv_heads;
  layout.head_dim = config_.head_dim;
  layout.page_tokens = config_.page_tokens;
  return layout;
}

const PagePool* PagedCache::Pool(KvFormat format) const {
  const int f = int(format);
  return f >= kNumKvFormats ? nullptr : pools_[f].get();
}

// ---- accounting ----

namespace {
// Priority of a hot page's tier: a page shared by owners that disagree takes the highest.
enum class HotTier : int8_t { kNone = -1, kStale = 0, kAnchor = 1, kRecent = 2 };
}  // namespace

KvAccounting PagedCache::Accounting() const {
  KvAccounting acc;
  acc.num_layers = config_.num_layers;
  acc.kv_heads = config_.kv_heads;
  acc.head_dim = config_.head_dim;
  acc.num_sequences = int64_t(sequences_.size());
  const int page_tokens = config_.page_tokens;

  // Per physical page: valid tokens (-1: not referenced) and hottest tier.
  std::vector<int32_t> page_tokens_seen[kNumKvFormats];
  std::vector<HotTier> page_tier[kNumKvFormats];
  for (int f = 0; f < kNumKvFormats; ++f) {
    if (!pools_[f]) continue;
    page_tokens_seen[f].assign(size_t(pools_[f]->capacity_pages()), -1);
    page_tier[f].assign(size_t(pools_[f]->capacity_pages()), HotTier::kNone);
  }
  for (const auto& [id, sequence] : sequences_) {
    for (const BlockTable& table : sequence.layers) {
      acc.logical_token_layers += table.num_tokens;
      acc.metadata_bytes += table.metadata_bytes();
      // Pages from here on hold a recent token (the partly filled last page among them): the policy's boundary.
      const size_t recent_page = size_t(StalePageEnd(config_.policy, page_tokens, table.num_tokens));
      for (size_t index = 0; index < table.pages.size(); ++index) {
        const PageRef page = table.pages[index];
        const int f = int(page.format);
        const int valid = table.ValidTokens(index, page_tokens);
        page_tokens_seen[f][size_t(page.page_id)] = valid;
        HotTier tier = HotTier::kStale;
        if (index >= recent_page) {
          tier = HotTier::kRecent;
        } else if (IsProtected(sequence, index)) {
          tier = HotTier::kAnchor;
        }
        HotTier& seen = page_tier[f][size_t(page.page_id)];
        seen = std::max(seen, tier);
      }
    }
  }
  size_t page_bytes_total = 0;
  for (int f = 0; f < kNumKvFormats; ++f) {
    if (!pools_[f]) continue;
    FormatAccounting& fa = acc.formats[f];
    const PageLayout layout = Layout(KvFormat(f));
    fa.capacity_pages = pools_[f]->capacity_pages();
    fa.page_bytes = layout.page_bytes();
    for (size_t p = 0; p < page_tokens_seen[f].size(); ++p) {
      const int32_t valid = page_tokens_seen[f][p];
      if (valid < 0) continue;
      ++fa.live_pages;
      fa.token_layers += valid;
      if (KvFormat(f) == KvFormat::kTq3) {
        acc.stale_tq3_token_layers += valid;
      } else {
        switch (page_tier[f][p]) {
          case HotTier::kRecent: acc.recent_token_layers += valid; break;
          case HotTier::kAnchor: acc.anchor_token_layers += valid; break;
          default: acc.stale_kept_hot_token_layers += valid; break;
        }
      }
    }
    const size_t vectors = size_t(fa.token_layers) * 2 * config_.kv_heads;  // K and V
    fa.live_bytes = size_t(fa.live_pages) * fa.page_bytes;
    fa.code_bytes = vectors * layout.code_bytes();
    fa.scale_bytes = vectors * layout.scale_bytes();
    fa.slack_bytes = fa.live_bytes - fa.code_bytes - fa.scale_bytes;
    acc.stored_token_layers += fa.token_layers;
    acc.code_bytes += fa.code_bytes;
    acc.scale_bytes += fa.scale_bytes;
    acc.slack_bytes += fa.slack_bytes;
    page_bytes_total += fa.live_bytes;
  }
  acc.total_bytes = page_bytes_total + acc.metadata_bytes;
  if (acc.stored_token_layers > 0) {
    const double positions = double(acc.stored_token_layers) / config_.num_layers;
    acc.bytes_per_live_token = double(acc.total_bytes) / positions;
    const double values = double(acc.stored_token_layers) * 2.0 * config_.kv_heads * config_.head_dim;
    constexpr double kBf16BytesPerValue = 2.0;
    constexpr double kFp8BytesPerValue = 1.0;
    acc.compression_vs_bf16 = values * kBf16BytesPerValue / double(acc.total_bytes);
    acc.compression_vs_fp8 = values * kFp8BytesPerValue / double(acc.total_bytes);
  }
  return acc;
}

}  // namespace minimakv
