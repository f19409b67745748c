#include "tools/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace minimakv {

ProgressLine::ProgressLine(std::string label, Mode mode, std::FILE* stream)
    : label_(std::move(label)), stream_(stream), start_(std::chrono::steady_clock::now()) {
  const bool is_tty = stream_ != nullptr && isatty(fileno(stream_)) == 1;
  enabled_ = stream_ != nullptr && mode != Mode::kOff;
  redraw_ = enabled_ && is_tty;
}

ProgressLine::~ProgressLine() { Finish(); }

double ProgressLine::ElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressLine::FormatLine(std::string_view label, double elapsed_seconds, double fraction_done,
                                     std::string_view message) {
  char head[96];
  if (fraction_done >= 0.0) {
    const double clamped = std::clamp(fraction_done, 0.0, 1.0);
    // Linear ETA: remaining fraction at the average rate so far.
    if (clamped > 0.0 && clamped < 1.0) {
      const double eta_seconds = elapsed_seconds * (1.0 - clamped) / clamped;
      std::snprintf(head, sizeof(head), " [%.1fs] %3d%% ETA %.0fs", elapsed_seconds, int(std::floor(clamped * 100)),
                    eta_seconds);
    } else {
      std::snprintf(head, sizeof(head), " [%.1fs] %3d%%", elapsed_seconds, int(std::floor(clamped * 100)));
    }
  } else {
    std::snprintf(head, sizeof(head), " [%.1fs]", elapsed_seconds);
  }
  std::string line(label);
  line += head;
  if (!message.empty()) {
    line += ": ";
    line += message;
  }
  return line;
}

void ProgressLine::Emit(double fraction_done, std::string_view message) {
  if (!enabled_) return;
  const double elapsed = ElapsedSeconds();
  const bool final_step = fraction_done >= 1.0;
  if (!redraw_ && !final_step && elapsed - last_log_seconds_ < kMinLogIntervalSeconds) return;
  last_log_seconds_ = elapsed;
  const std::string line = FormatLine(label_, elapsed, fraction_done, message);
  if (redraw_) {
    std::fprintf(stream_, "\r\033[K%s", line.c_str());  // carriage return + ANSI "erase to end of line"
    line_open_ = true;
  } else {
    std::fprintf(stream_, "%s\n", line.c_str());
  }
  std::fflush(stream_);
}

void ProgressLine::Update(std::string_view message) { Emit(-1.0, message); }

void ProgressLine::Update(double fraction_done, std::string_view message) { Emit(fraction_done, message); }

void ProgressLine::Finish() {
  if (line_open_) {
    std::fprintf(stream_, "\r\033[K");
    std::fflush(stream_);
    line_open_ = false;
  }
}

}  // namespace minimakv
