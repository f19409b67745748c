// Rendering and progress wrappers for the bench and fidelity rows, shared by their commands and by the tour.
#pragma once

#include <string>
#include <vector>

#include "minimakv/status.h"
#include "tools/decode_bench.h"
#include "tools/fidelity.h"
#include "tools/json.h"
#include "tools/progress.h"

namespace minimakv::cli {

JsonValue DecodeBenchRowToJson(const DecodeBenchRow& row);
std::string DecodeBenchRowsToText(const std::vector<DecodeBenchRow>& rows);
Status RunDecodeBenchWithProgress(const DecodeBenchConfig& config, ProgressLine::Mode mode,
                                  std::vector<DecodeBenchRow>* rows);

JsonValue FidelityRowToJson(const FidelityRow& row);
std::string FidelityRowsToText(const std::vector<FidelityRow>& rows);
Status RunFidelityWithProgress(const FidelityConfig& config, ProgressLine::Mode mode, std::vector<FidelityRow>* rows);

}  // namespace minimakv::cli
