// Progress on stderr for CLI work that takes more than a few seconds. stdout belongs to the results (and to
// --json), so progress never goes there.
//
// On a terminal the line is redrawn in place ("\r" + erase) with elapsed time, and percentage + ETA when the
// caller knows the fraction done. When stderr is not a terminal (CI logs, pipes) each new message is printed on
// its own line, at most one line per kMinLogIntervalSeconds unless the message is final, so logs stay short.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

namespace minimakv {

class ProgressLine {
 public:
  enum class Mode { kAuto, kOff, kAlways };  // kAuto: redraw on a TTY, plain lines otherwise
  static constexpr double kMinLogIntervalSeconds = 2.0;

  ProgressLine(std::string label, Mode mode = Mode::kAuto, std::FILE* stream = stderr);
  ~ProgressLine();  // calls Finish()
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // A step with unknown total ("fp8 32768 ctx x1 thr").
  void Update(std::string_view message);
  // A step with a known fraction done in [0, 1]: adds percentage and ETA.
  void Update(double fraction_done, std::string_view message);
  // Clears the redrawn line (TTY) so the next stderr/stdout output starts clean. Idempotent.
  void Finish();

  double ElapsedSeconds() const;

  // Formats the text of one progress line (exposed for tests): "label [12.3s] 40% ETA 18s: message".
  static std::string FormatLine(std::string_view label, double elapsed_seconds, double fraction_done,
                                std::string_view message);

 private:
  void Emit(double fraction_done, std::string_view message);

  std::string label_;
  std::FILE* stream_;
  bool enabled_ = false;
  bool redraw_ = false;  // terminal: redraw one line in place
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_;
  double last_log_seconds_ = -1e9;
};

}  // namespace minimakv
