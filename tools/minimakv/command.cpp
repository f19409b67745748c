#include "command.h"

#include <cstdio>
#include <filesystem>
#include <limits>

#include "minimakv/model_files.h"

namespace minimakv::cli {

bool ParseFlags(ArgParser& parser, const std::vector<std::string>& args, int* exit_code) {
  const Status s = parser.Parse(args);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: error: %s\n", parser.command().c_str(), s.message().c_str());
    *exit_code = kExitUsage;
    return false;
  }
  if (parser.help_requested()) {
    std::fputs(parser.Help().c_str(), stdout);
    *exit_code = kExitOk;
    return false;
  }
  return true;
}

int ReportError(const std::string& command, const Status& status) {
  std::fprintf(stderr, "%s: error: %s\n", command.c_str(), status.message().c_str());
  const bool usage = status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kNotFound;
  return usage ? kExitUsage : kExitFailure;
}

void PrintJson(const JsonValue& value) {
  constexpr int kIndentSpaces = 2;
  const std::string text = value.Dump(kIndentSpaces);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

Status LoadModel(const std::string& path, std::unique_ptr<LlamaModel>* model) {
  Status s = LlamaModel::Load(path, model);
  if (s.code() == StatusCode::kNotFound && path == DefaultModelPath() && !std::filesystem::exists(path)) {
    s = Status::NotFound(s.message() + " (fetch the default model with scripts/fetch_model.sh)");
  }
  return s;
}

Status SessionCapacity(size_t prompt_tokens, int64_t new_tokens, const std::string& flag, int* max_tokens) {
  if (new_tokens < 0) return Status::InvalidArgument(flag + " " + std::to_string(new_tokens) + " must be >= 0");
  const int64_t total = int64_t(prompt_tokens) + new_tokens + 1;
  if (total > std::numeric_limits<int>::max()) {
    return Status::InvalidArgument(flag + " " + std::to_string(new_tokens) + " after a prompt of " +
                                   std::to_string(prompt_tokens) + " tokens passes 2^31 - 1 tokens");
  }
  *max_tokens = int(total);
  return Status::Ok();
}

ProgressLine::Mode ProgressModeFrom(const std::string& flag_value) {
  if (flag_value == "off") return ProgressLine::Mode::kOff;
  if (flag_value == "always") return ProgressLine::Mode::kAlways;
  return ProgressLine::Mode::kAuto;
}

}  // namespace minimakv::cli
