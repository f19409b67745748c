// The minimakv CLI against bad values: each case runs the built binary (MINIMAKV_CLI_PATH, set when the CLI is
// built) and checks the exit code and that the error names the bad value.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "minimakv/llama_model.h"
#include "minimakv/model_files.h"

namespace minimakv {
namespace {

#ifdef MINIMAKV_CLI_PATH
struct CliResult {
  int exit_code = -1;
  std::string stderr_text;
};

// Runs `minimakv <args>` with stdout discarded and stderr captured.
CliResult RunCli(const std::string& args) {
  const std::string err_path = ::testing::TempDir() + "/cli_robustness." + std::to_string(::getpid()) + ".err";
  const std::string command = std::string(MINIMAKV_CLI_PATH) + " " + args + " > /dev/null 2> " + err_path;
  const int status = std::system(command.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  std::ostringstream text;
  text << in.rdbuf();
  r.stderr_text = text.str();
  std::remove(err_path.c_str());
  return r;
}

bool DefaultModelLoads() {
  std::unique_ptr<LlamaModel> model;
  return LlamaModel::Load(DefaultModelPath(), &model).ok();
}

// A decode budget whose sum with the prompt passes INT_MAX is a usage error naming the flag (was: the int sum
// overflowed, undefined behaviour; in a release build the session silently fell back to the model's context).
TEST(CliRobustness, DecodeBudgetPastIntMaxIsAUsageError) {
  if (!DefaultModelLoads()) GTEST_SKIP() << "model not fetched: " << DefaultModelPath();
  CliResult r = RunCli("generate --prompt hi --max-tokens 2147483647");
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("--max-tokens 2147483647"), std::string::npos) << r.stderr_text;
  r = RunCli("generate --prompt hi --max-tokens -1");
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("--max-tokens -1"), std::string::npos) << r.stderr_text;
}

// The tour's context is checked before the plan doubles it (was: 2 * 9223372036854775807 overflowed int64).
TEST(CliRobustness, TourContextOutOfRangeIsAUsageError) {
  for (const char* context : {"9223372036854775807", "0", "16777217"}) {
    const CliResult r = RunCli(std::string("tour --progress off --context ") + context);
    EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
    EXPECT_NE(r.stderr_text.find(std::string("--context ") + context + " not in [1, 2^24]"), std::string::npos)
        << r.stderr_text;
  }
}

// A model file that lacks a metadata key gets an error naming the key, without the hint to fetch the default
// model (was: "... is missing (fetch the default model with scripts/fetch_model.sh)" for any --model file).
TEST(CliRobustness, IncompleteModelFileIsNotSentToTheFetchScript) {
  const std::string model_path = ::testing::TempDir() + "/cli_robustness." + std::to_string(::getpid()) + ".gguf";
  {
    // GGUF v3, no tensors, one key: general.architecture = "llama" (little-endian).
    std::ofstream out(model_path, std::ios::binary);
    auto put = [&](uint64_t x, int bytes) {
      for (int i = 0; i < bytes; ++i) out.put(char(x >> (8 * i)));
    };
    const std::string key = "general.architecture", value = "llama";
    out << "GGUF";
    put(3, 4);             // version
    put(0, 8);             // tensors
    put(1, 8);             // metadata keys
    put(key.size(), 8);
    out << key;
    put(8, 4);             // string
    put(value.size(), 8);
    out << value;
  }
  for (const std::string& command : {std::string("run --progress off"), std::string("eval niah --progress off")}) {
    const CliResult r = RunCli(command + " --model " + model_path);
    EXPECT_NE(r.exit_code, 0) << command;
    EXPECT_NE(r.stderr_text.find("'llama.block_count' is missing"), std::string::npos) << r.stderr_text;
    EXPECT_EQ(r.stderr_text.find("fetch_model.sh"), std::string::npos) << r.stderr_text;
  }
  std::remove(model_path.c_str());
}

// eval niah with no passkey per (context, depth) is a usage error (was: a table of zero cases and exit 0).
TEST(CliRobustness, NiahWithoutSeedsIsAUsageError) {
  for (const char* seeds : {"0", "-3"}) {
    const CliResult r = RunCli(std::string("eval niah --progress off --contexts 300 --seeds ") + seeds);
    EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
    EXPECT_NE(r.stderr_text.find(std::string("--seeds ") + seeds + " must be >= 1"), std::string::npos)
        << r.stderr_text;
  }
}

// A text of fewer than 2 tokens has no position to score: a usage error naming the text (was: exit 0 with
// 0 positions and a perplexity of exp(0 / 1); a text of 0 tokens divided by zero).
TEST(CliRobustness, KldTextTooShortIsAUsageError) {
  if (!DefaultModelLoads()) GTEST_SKIP() << "model not fetched: " << DefaultModelPath();
  const std::string text_path = ::testing::TempDir() + "/cli_robustness." + std::to_string(::getpid()) + ".txt";
  std::ofstream(text_path) << "a";
  const CliResult r = RunCli("eval kld --text " + text_path + " --progress off");
  std::remove(text_path.c_str());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("gives 1 tokens"), std::string::npos) << r.stderr_text;
}
#endif

}  // namespace
}  // namespace minimakv
