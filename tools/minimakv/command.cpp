#include "command.h"

#include <cstdio>

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

ProgressLine::Mode ProgressModeFrom(const std::string& flag_value) {
  if (flag_value == "off") return ProgressLine::Mode::kOff;
  if (flag_value == "always") return ProgressLine::Mode::kAlways;
  return ProgressLine::Mode::kAuto;
}

}  // namespace minimakv::cli
