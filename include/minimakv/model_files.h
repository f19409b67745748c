// Where minimakv finds its default model: SmolLM2-135M-Instruct (Q4_1 GGUF) as scripts/fetch_model.sh places it.
#pragma once

#include <string>

namespace minimakv {

inline constexpr const char* kDefaultModelFileName = "SmolLM2-135M-Instruct.Q4_1.gguf";

// $MINIMAKV_MODEL if set; else $MINIMAKV_MODEL_DIR/<default file>; else ~/.cache/minimakv/models/<default file>.
std::string DefaultModelPath();

}  // namespace minimakv
