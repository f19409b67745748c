// TokenRange: tokens [begin_token, end_token) of one sequence (pins in the cache, tiers in synthetic pools).
#pragma once

#include <cstdint>

namespace minimakv {

struct TokenRange {
  int64_t begin_token = 0;
  int64_t end_token = 0;
};

}  // namespace minimakv
