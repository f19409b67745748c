#include "minimakv/model_files.h"

#include <cstdlib>

namespace minimakv {

namespace {

std::string ModelPath(const char* path_variable, const char* file_name) {
  if (const char* path = std::getenv(path_variable); path != nullptr && *path != '\0') return path;
  if (const char* dir = std::getenv("MINIMAKV_MODEL_DIR"); dir != nullptr && *dir != '\0') {
    return std::string(dir) + "/" + file_name;
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/minimakv/models/" + file_name;
}

}  // namespace

std::string DefaultModelPath() { return ModelPath("MINIMAKV_MODEL", kDefaultModelFileName); }

std::string QwenModelPath() { return ModelPath("MINIMAKV_QWEN_MODEL", kQwenModelFileName); }

}  // namespace minimakv
