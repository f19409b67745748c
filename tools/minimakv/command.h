// What every subcommand of the minimakv CLI shares: its signature and the helpers for flags, errors and output.
// Conventions: results on stdout (JSON with --json), progress and errors on stderr; exit 0 on success, 1 when the
// work failed, 2 for a usage error (unknown flag, bad value).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minimakv/inference_session.h"
#include "minimakv/llama_model.h"
#include "minimakv/status.h"
#include "tools/cli_args.h"
#include "tools/json.h"
#include "tools/progress.h"

namespace minimakv::cli {

// A subcommand: receives the arguments after its name, returns the process exit code.
using CommandFn = int (*)(const std::vector<std::string>& args);

// Parses `args`; on --help prints the help to stdout and sets *exit_code = 0; on a bad argument prints the error
// to stderr and sets *exit_code = 2. Returns true when the command should go on.
bool ParseFlags(ArgParser& parser, const std::vector<std::string>& args, int* exit_code);

// Prints "minimakv <command>: error: <message>" to stderr; returns kExitFailure, or kExitUsage for
// InvalidArgument/NotFound (the user asked for something that does not exist or is malformed).
int ReportError(const std::string& command, const Status& status);

// Writes `value` to stdout followed by a newline. Pretty-printed with 2-space indent.
void PrintJson(const JsonValue& value);

// LlamaModel::Load; where the default model file (DefaultModelPath) is absent, the NotFound also says how to
// fetch it (a file that lacks a key or tensor is not fixed by a fetch, so other errors carry no hint).
Status LoadModel(const std::string& path, std::unique_ptr<LlamaModel>* model);

// The KV capacity (SessionOptions::max_tokens) for a prompt of `prompt_tokens` tokens and `new_tokens` decoded
// after it: prompt + new + 1, summed in 64 bits. InvalidArgument naming `flag` when new_tokens is negative or the
// sum passes INT_MAX (sessions count tokens in int).
Status SessionCapacity(size_t prompt_tokens, int64_t new_tokens, const std::string& flag, int* max_tokens);

// Progress mode from the common --progress flag value ("auto", "always", "off").
ProgressLine::Mode ProgressModeFrom(const std::string& flag_value);
inline const std::vector<std::string> kProgressChoices = {"auto", "always", "off"};
inline constexpr const char* kProgressHelp =
    "progress on stderr: auto (redrawn on a terminal, plain lines otherwise), always, off";
// The --hot-layers, --bf16-layers and --auto-hot-layers flags of every command that runs a model
// (SessionOptions::hot_layers, bf16_layers, auto_hot_layers): Add registers them, Apply copies them into a
// session's options.
struct HotLayerFlags {
  std::vector<int> layers;
  std::vector<int> bf16_layers;
  bool auto_outliers = true;
  void Add(ArgParser& parser) {
    parser.AddIntList("hot-layers", "layers kept FP8 (never converted to TQ3) in the tq3 and minima modes",
                      &layers);
    parser.AddIntList("bf16-layers", "layers stored BF16 in the fp8, tq3 and minima modes (besides "
                      "--auto-hot-layers')", &bf16_layers);
    parser.AddBool("auto-hot-layers",
                   "also store BF16 the model's key-bias outlier layers (Qwen2.5-Coder-1.5B: 0, 1, 7, 15, whose key "
                   "biases even FP8 loses; none without qkv biases); --auto-hot-layers=false: only --hot-layers and "
                   "--bf16-layers",
                   &auto_outliers);
  }
  void Apply(SessionOptions* options) const {
    options->hot_layers = layers;
    options->bf16_layers = bf16_layers;
    options->auto_hot_layers = auto_outliers;
  }
};

}  // namespace minimakv::cli
