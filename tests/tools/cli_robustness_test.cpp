// The minimakv CLI against bad values: each case runs the built binary (MINIMAKV_CLI_PATH, set when the CLI is
// built) and checks the exit code and that the error names the bad value.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

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
