// ModelShape: the attention geometry of a model that decides its KV-cache size: how many layers keep a KV cache
// that grows with the context, and the KV heads and head dimension of each. Built from a named preset or from a
// Hugging Face config.json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/status.h"

namespace minimakv {

struct ModelShape {
  std::string name;
  int num_layers = 0;                // all decoder layers
  int full_attention_layers = 0;     // layers whose KV cache holds every token of the context
  int sliding_attention_layers = 0;  // layers whose KV cache holds at most sliding_window_tokens
  int64_t sliding_window_tokens = 0; // 0 when there are no sliding layers
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;

  // Layers with a fixed-size recurrent state instead of a KV cache (Qwen3.6 Gated DeltaNet layers); their
  // memory is part of the per-request fixed state, not of the KV cache.
  int linear_attention_layers() const { return num_layers - full_attention_layers - sliding_attention_layers; }
  // Tokens of KV one request of `context_tokens` keeps in one layer of each kind.
  int64_t sliding_tokens(int64_t context_tokens) const {
    return context_tokens < sliding_window_tokens ? context_tokens : sliding_window_tokens;
  }
};

// InvalidArgument naming the bad field unless the counts are positive and consistent (kv_heads divides q_heads,
// full + sliding <= num_layers, at least one KV layer, a window when there are sliding layers).
Status CheckModelShape(const ModelShape& shape);

// Presets (the shapes the spec and benchmarks use):
//   "qwen3.6-27b":  64 layers, every 4th full attention (16), 24 query / 4 KV heads, head_dim 256.
//   "llama-3.1-8b": 32 layers, all full attention, 32 query / 8 KV heads, head_dim 128.
std::vector<std::string_view> ModelShapePresetNames();
// NotFound listing the known names when `name` is not a preset.
Status ModelShapeFromPreset(std::string_view name, ModelShape* shape);

// Reads a Hugging Face config.json text. Uses num_hidden_layers, num_attention_heads, num_key_value_heads
// (default: num_attention_heads), head_dim (default: hidden_size / num_attention_heads). Which layers keep a KV
// cache: `layer_types` ("full_attention", "sliding_attention", "linear_attention") when present, else
// `full_attention_interval` N (layers N-1, 2N-1, ... are full attention, as Qwen3-Next/Qwen3.6 count them),
// else every layer. `sliding_window` gives the window of sliding layers. Multimodal configs that nest the text
// model under "text_config" (Qwen3.5/3.6) are handled. `name` labels the result (e.g. the file path).
// Errors name the missing or bad key.
Status ModelShapeFromHfConfigText(std::string_view json_text, std::string name, ModelShape* shape);
// Same, reading the file at `path` (NotFound if it cannot be read).
Status ModelShapeFromHfConfigFile(const std::string& path, ModelShape* shape);

}  // namespace minimakv
