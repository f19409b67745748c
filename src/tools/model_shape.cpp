#include "minimakv/model_shape.h"

#include <fstream>
#include <sstream>

#include "tools/json.h"

namespace minimakv {

namespace {

// Qwen3.6-27B (spec, "The paper's numbers"): 64 layers, one full-attention layer in every 4 (the others are
// Gated DeltaNet linear-attention layers with a fixed-size state).
constexpr int kQwen36Layers = 64;
constexpr int kQwen36FullAttentionInterval = 4;

ModelShape Qwen36_27b() {
  ModelShape s;
  s.name = "qwen3.6-27b";
  s.num_layers = kQwen36Layers;
  s.full_attention_layers = kQwen36Layers / kQwen36FullAttentionInterval;
  s.q_heads = 24;
  s.kv_heads = 4;
  s.head_dim = 256;
  return s;
}

// Llama-3.1-8B (its config.json): 32 layers, 32 query / 8 KV heads, hidden 4096 -> head_dim 128.
ModelShape Llama31_8b() {
  ModelShape s;
  s.name = "llama-3.1-8b";
  s.num_layers = 32;
  s.full_attention_layers = 32;
  s.q_heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  return s;
}

Status GetInt(const JsonValue& object, std::string_view key, int64_t* out) {
  const JsonValue* v = object.Find(key);
  if (v == nullptr || v->is_null()) return Status::NotFound("config.json has no \"" + std::string(key) + "\"");
  if (!v->GetInt64(out)) {
    return Status::InvalidArgument("config.json \"" + std::string(key) + "\" is " + v->Dump() +
                                   ", expected an integer");
  }
  return Status::Ok();
}

Status GetPositiveInt(const JsonValue& object, std::string_view key, int* out) {
  int64_t value = 0;
  MINIMAKV_RETURN_IF_ERROR(GetInt(object, key, &value));
  constexpr int64_t kMaxCount = 1 << 20;  // far beyond any real layer/head count; keeps products in range
  if (value < 1 || value > kMaxCount) {
    return Status::InvalidArgument("config.json \"" + std::string(key) + "\" is " + std::to_string(value) +
                                   ", expected a positive count");
  }
  *out = int(value);
  return Status::Ok();
}

}  // namespace

Status CheckModelShape(const ModelShape& s) {
  auto bad = [&](const std::string& what) { return Status::InvalidArgument("model shape '" + s.name + "': " + what); };
  if (s.num_layers < 1) return bad("num_layers " + std::to_string(s.num_layers) + " must be positive");
  if (s.full_attention_layers < 0 || s.sliding_attention_layers < 0 ||
      s.full_attention_layers + s.sliding_attention_layers > s.num_layers) {
    return bad("full_attention_layers " + std::to_string(s.full_attention_layers) + " + sliding_attention_layers " +
               std::to_string(s.sliding_attention_layers) + " must be within num_layers " +
               std::to_string(s.num_layers));
  }
  if (s.full_attention_layers + s.sliding_attention_layers == 0) return bad("no layer keeps a KV cache");
  if (s.sliding_attention_layers > 0 && s.sliding_window_tokens < 1) {
    return bad("sliding_window_tokens " + std::to_string(s.sliding_window_tokens) +
               " must be positive when there are sliding-attention layers");
  }
  if (s.q_heads < 1) return bad("q_heads " + std::to_string(s.q_heads) + " must be positive");
  if (s.kv_heads < 1 || s.q_heads % s.kv_heads != 0) {
    return bad("kv_heads " + std::to_string(s.kv_heads) + " must be positive and divide q_heads " +
               std::to_string(s.q_heads));
  }
  if (s.head_dim < 1) return bad("head_dim " + std::to_string(s.head_dim) + " must be positive");
  return Status::Ok();
}

std::vector<std::string_view> ModelShapePresetNames() { return {"qwen3.6-27b", "llama-3.1-8b"}; }

Status ModelShapeFromPreset(std::string_view name, ModelShape* shape) {
  if (name == "qwen3.6-27b") {
    *shape = Qwen36_27b();
  } else if (name == "llama-3.1-8b") {
    *shape = Llama31_8b();
  } else {
    std::string known;
    for (std::string_view n : ModelShapePresetNames()) known += (known.empty() ? "" : ", ") + std::string(n);
    return Status::NotFound("unknown model preset '" + std::string(name) + "' (known: " + known + ")");
  }
  return Status::Ok();
}

Status ModelShapeFromHfConfigText(std::string_view json_text, std::string name, ModelShape* shape) {
  JsonValue root;
  MINIMAKV_RETURN_IF_ERROR(ParseJson(json_text, &root));
  if (!root.is_object()) return Status::InvalidArgument("config.json: the top-level value is not an object");
  // Multimodal configs (Qwen3.5/3.6 "...ForConditionalGeneration") keep the language model under text_config.
  const JsonValue* config = &root;
  if (root.Find("num_hidden_layers") == nullptr) {
    if (const JsonValue* text = root.Find("text_config"); text != nullptr && text->is_object()) config = text;
  }

  ModelShape s;
  s.name = std::move(name);
  MINIMAKV_RETURN_IF_ERROR(GetPositiveInt(*config, "num_hidden_layers", &s.num_layers));
  MINIMAKV_RETURN_IF_ERROR(GetPositiveInt(*config, "num_attention_heads", &s.q_heads));
  s.kv_heads = s.q_heads;  // no num_key_value_heads: multi-head attention (transformers' default)
  if (const JsonValue* v = config->Find("num_key_value_heads"); v != nullptr && !v->is_null()) {
    MINIMAKV_RETURN_IF_ERROR(GetPositiveInt(*config, "num_key_value_heads", &s.kv_heads));
  }
  if (const JsonValue* v = config->Find("head_dim"); v != nullptr && !v->is_null()) {
    MINIMAKV_RETURN_IF_ERROR(GetPositiveInt(*config, "head_dim", &s.head_dim));
  } else {
    int hidden_size = 0;
    Status st = GetPositiveInt(*config, "hidden_size", &hidden_size);
    if (!st.ok()) return Status::InvalidArgument("config.json has neither \"head_dim\" nor \"hidden_size\"");
    if (hidden_size % s.q_heads != 0) {
      return Status::InvalidArgument("config.json hidden_size " + std::to_string(hidden_size) +
                                     " is not a multiple of num_attention_heads " + std::to_string(s.q_heads));
    }
    s.head_dim = hidden_size / s.q_heads;
  }

  const JsonValue* layer_types = config->Find("layer_types");
  const JsonValue* interval = config->Find("full_attention_interval");
  if (layer_types != nullptr && !layer_types->is_null()) {
    if (!layer_types->is_array()) return Status::InvalidArgument("config.json \"layer_types\" is not a list");
    if (int64_t(layer_types->size()) != s.num_layers) {
      return Status::InvalidArgument("config.json \"layer_types\" has " + std::to_string(layer_types->size()) +
                                     " entries but num_hidden_layers is " + std::to_string(s.num_layers));
    }
    for (size_t i = 0; i < layer_types->items().size(); ++i) {
      const JsonValue& t = layer_types->items()[i];
      const std::string& kind = t.as_string();
      if (t.is_string() && kind == "full_attention") {
        ++s.full_attention_layers;
      } else if (t.is_string() && kind == "sliding_attention") {
        ++s.sliding_attention_layers;
      } else if (!(t.is_string() && kind == "linear_attention")) {
        return Status::InvalidArgument("config.json \"layer_types\"[" + std::to_string(i) + "] is " + t.Dump() +
                                       ", expected \"full_attention\", \"sliding_attention\" or \"linear_attention\"");
      }
    }
  } else if (interval != nullptr && !interval->is_null()) {
    int every = 0;
    MINIMAKV_RETURN_IF_ERROR(GetPositiveInt(*config, "full_attention_interval", &every));
    // Qwen3-Next: layer i is full attention when (i + 1) % interval == 0.
    s.full_attention_layers = s.num_layers / every;
  } else {
    s.full_attention_layers = s.num_layers;
  }
  if (s.sliding_attention_layers > 0) {
    int64_t window = 0;
    Status st = GetInt(*config, "sliding_window", &window);
    if (!st.ok() || window < 1) {
      return Status::InvalidArgument("config.json has sliding_attention layers but no positive \"sliding_window\"");
    }
    s.sliding_window_tokens = window;
  }
  MINIMAKV_RETURN_IF_ERROR(CheckModelShape(s));
  *shape = std::move(s);
  return Status::Ok();
}

Status ModelShapeFromHfConfigFile(const std::string& path, ModelShape* shape) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read config file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  Status s = ModelShapeFromHfConfigText(text.str(), path, shape);
  if (!s.ok()) return Status::InvalidArgument(path + ": " + s.message());
  return Status::Ok();
}

}  // namespace minimakv
