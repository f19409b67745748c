// A small command-line flag parser for the minimakv CLI (no external dependency).
//
// Accepted forms: `--flag value`, `--flag=value`, and for boolean flags `--flag` alone (or `--flag=true|false`).
// `-h` / `--help` sets help_requested(). Anything else (unknown flag, missing or malformed value, a stray
// positional argument) is an InvalidArgument naming the flag and the bad text; unknown flags get a
// "did you mean --x?" hint when a declared flag is close. The CLI turns those errors into exit code 2.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/status.h"

namespace minimakv {

// Exit codes of the CLI (BSD sysexits-style split between "ran and failed" and "used wrongly").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

class ArgParser {
 public:
  // `command` is what the user typed to get here ("minimakv plan"), `summary` one line of what it does.
  ArgParser(std::string command, std::string summary);

  // Declares flags. `name` is without the leading dashes. The target keeps its current value as the default
  // (shown in --help). Each pointer must outlive Parse().
  void AddString(std::string name, std::string value_name, std::string help, std::string* target);
  void AddInt(std::string name, std::string help, int64_t* target);
  void AddInt(std::string name, std::string help, int* target);
  void AddDouble(std::string name, std::string help, double* target);
  void AddBool(std::string name, std::string help, bool* target);
  // Comma-separated list of integers ("32768,65536"); a value replaces the default list, repeats append.
  // Integers accept a k/K suffix (x1024): "32k" = 32768, as context lengths are usually written.
  void AddIntList(std::string name, std::string help, std::vector<int64_t>* target);
  void AddIntList(std::string name, std::string help, std::vector<int>* target);
  // One of `choices`.
  void AddChoice(std::string name, std::vector<std::string> choices, std::string help, std::string* target);
  // Free text appended to --help (examples, notes).
  void SetEpilog(std::string epilog) { epilog_ = std::move(epilog); }

  // Parses `args` (without the program and subcommand names).
  Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  // True when the flag appeared on the command line (as opposed to keeping its default).
  bool WasSet(std::string_view name) const;

  std::string Help() const;
  const std::string& command() const { return command_; }

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // shown in help: --context N
    std::string help;
    std::string default_text;
    bool is_bool = false;
    bool seen = false;
    bool list_replaced = false;  // first occurrence of a list flag replaces the default
    std::function<Status(Flag&, std::string_view)> set;
  };
  static Flag MakeFlag(std::string name, std::string value_name, std::string help, std::string default_text);
  Flag* FindFlag(std::string_view name);
  std::string SuggestFlag(std::string_view name) const;

  std::string command_;
  std::string summary_;
  std::string epilog_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
};

// Value parsers shared with the commands (each error names the text it could not read).
Status ParseInt64Value(std::string_view text, int64_t* out);   // decimal, optional k/K suffix (x1024)
Status ParseDoubleValue(std::string_view text, double* out);   // finite decimal or exponent form
Status ParseInt64ListValue(std::string_view text, std::vector<int64_t>* out);

}  // namespace minimakv
