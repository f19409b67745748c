#include "minimakv/model_files.h"

#include <cstdlib>

namespace minimakv {

std::string DefaultModelPath() {
  if (const char* path = std::getenv("MINIMAKV_MODEL"); path != nullptr && *path != '\0') return path;
  if (const char* dir = std::getenv("MINIMAKV_MODEL_DIR"); dir != nullptr && *dir != '\0') {
    return std::string(dir) + "/" + kDefaultModelFileName;
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.cache/minimakv/models/" + kDefaultModelFileName;
}

}  // namespace minimakv
