// Rendering and progress wrappers for the bench and fidelity rows, shared by their commands and by the tour.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "minimakv/status.h"
#include "tools/decode_bench.h"
#include "tools/fidelity.h"
#include "tools/json.h"
#include "tools/progress.h"
#include "command.h"

namespace minimakv::cli {

JsonValue DecodeBenchRowToJson(const DecodeBenchRow& row);
std::string DecodeBenchRowsToText(const std::vector<DecodeBenchRow>& rows);
Status RunDecodeBenchWithProgress(const DecodeBenchConfig& config, ProgressLine::Mode mode,
                                  std::vector<DecodeBenchRow>* rows);

JsonValue FidelityRowToJson(const FidelityRow& row);
std::string FidelityRowsToText(const std::vector<FidelityRow>& rows);
Status RunFidelityWithProgress(const FidelityConfig& config, ProgressLine::Mode mode, std::vector<FidelityRow>* rows);

// Prints rows to stdout as one JSON row per line (jsonl), a JSON array (json) or the text table.
template <typename Row>
void PrintRows(const std::vector<Row>& rows, bool json, bool jsonl, JsonValue (*to_json)(const Row&),
               std::string (*to_text)(const std::vector<Row>&)) {
  if (jsonl) {
    for (const Row& r : rows) std::printf("%s\n", to_json(r).Dump().c_str());
  } else if (json) {
    JsonValue array = JsonValue::Array();
    for (const Row& r : rows) array.Append(to_json(r));
    PrintJson(array);
  } else {
    std::fputs(to_text(rows).c_str(), stdout);
  }
}

}  // namespace minimakv::cli
