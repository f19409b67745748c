// minimakv: the command-line tool. One table names every subcommand; each lives in its own cmd_<name>.cpp.
// Adding a command = one new cmd_<name>.cpp defining `int Run<Name>Command(const std::vector<std::string>&)`
// in namespace minimakv::cli, plus one X(...) line below.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "command.h"

namespace minimakv::cli {

// X(name, FunctionStem, one-line help). Order = order in `minimakv --help`.
#define MINIMAKV_CLI_COMMANDS(X)                                                                                     \
  X("tour", Tour, "a short tour on a synthetic 32K-token sequence: accounting, fidelity, speed vs BF16")            \
  X("plan", Plan, "KV bytes per token and concurrent requests for BF16, FP8 and Minima-KV (presets or config.json)") \
  X("bench", Bench, "CPU decode-attention speed per path (bf16, fp8, tq3, minima) with machine floors")             \
  X("fidelity", Fidelity, "attention-output error of each format against fp64 dense attention")                   \
  X("run", Run, "end-to-end demo: passkey retrieval on a real model with the KV cache in every mode")             \
  X("generate", Generate, "text generation with the CPU runtime (any KV mode)")                                   \
  X("eval", Eval, "niah: passkey accuracy per KV mode; kld: KL divergence / top-1 / perplexity vs bf16; capture-kv")

#define MINIMAKV_DECLARE_COMMAND(name, stem, help) int Run##stem##Command(const std::vector<std::string>& args);
MINIMAKV_CLI_COMMANDS(MINIMAKV_DECLARE_COMMAND)
#undef MINIMAKV_DECLARE_COMMAND

struct Command {
  const char* name;
  const char* help;
  CommandFn run;
};

#define MINIMAKV_COMMAND_ENTRY(name, stem, help) {name, help, &Run##stem##Command},
constexpr Command kCommands[] = {MINIMAKV_CLI_COMMANDS(MINIMAKV_COMMAND_ENTRY)};
#undef MINIMAKV_COMMAND_ENTRY

void PrintToolHelp(std::FILE* out) {
  std::fprintf(out,
               "minimakv: a mixed-format paged KV cache (FP8 recent/anchor pages, TQ3 3-bit older pages) with\n"
               "direct per-format decode attention merged by a log-sum-exp merge.\n\n"
               "Usage: minimakv <command> [flags]     (minimakv <command> --help for its flags)\n\nCommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
  std::fprintf(out,
               "\nEvery command takes --json (results as JSON on stdout; progress and errors go to stderr).\n"
               "Exit codes: 0 success, 1 the work failed, 2 bad usage.\n"
               "Start with: minimakv tour\n");
}

// Runs one command. The library reports a caller's mistakes as Status values; an exception that still escapes (an
// allocation the checks did not foresee, a bug) ends the command with a message and exit code 1 instead of
// std::terminate's abort.
int RunCommand(const Command& command, const std::vector<std::string>& args) {
  try {
    return command.run(args);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "minimakv %s: error: out of memory\n", command.name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minimakv %s: error: unexpected exception: %s\n", command.name, e.what());
  }
  return kExitFailure;
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    PrintToolHelp(stdout);  // no command: help (the tour is one word away and takes a while)
    return kExitOk;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    if (argc >= 3) {  // `minimakv help plan` = `minimakv plan --help`
      for (const Command& c : kCommands) {
        if (argv[2] == std::string(c.name)) return RunCommand(c, {"--help"});
      }
    }
    PrintToolHelp(stdout);
    return kExitOk;
  }
  if (name == "--version") {
    std::printf("minimakv %s\n", MINIMAKV_VERSION_STRING);
    return kExitOk;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (name == c.name) return RunCommand(c, args);
  }
  std::fprintf(stderr, "minimakv: unknown command '%s'\n\n", name.c_str());
  PrintToolHelp(stderr);
  return kExitUsage;
}

}  // namespace minimakv::cli

int main(int argc, char** argv) { return minimakv::cli::Main(argc, argv); }
