#include "tools/cli_args.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tools/progress.h"

namespace minimakv {
namespace {

struct Flags {
  std::string preset = "qwen3.6-27b";
  std::vector<int64_t> contexts = {32768};
  std::vector<int> threads = {2};
  double budget_gib = 86.4;
  int page_tokens = 64;
  int64_t seed = 1;
  bool json = false;
  std::string shape = "llama-3.1-8b";
};

ArgParser MakeParser(Flags* f) {
  ArgParser p("minimakv plan", "Plans capacity.");
  p.AddString("preset", "NAME", "model preset", &f->preset);
  p.AddIntList("context", "context lengths", &f->contexts);
  p.AddIntList("threads", "threads", &f->threads);
  p.AddDouble("budget-gib", "budget", &f->budget_gib);
  p.AddInt("page-tokens", "tokens per page", &f->page_tokens);
  p.AddInt("seed", "seed", &f->seed);
  p.AddBool("json", "print JSON", &f->json);
  p.AddChoice("shape", {"llama-3.1-8b", "qwen3.6-27b"}, "layer shape", &f->shape);
  return p;
}

TEST(ArgParser, BothValueFormsBoolsListsAndDefaults) {
  Flags f;
  ArgParser p = MakeParser(&f);
  const Status s = p.Parse({"--context", "32768,64k", "--budget-gib=80.5", "--json", "--page-tokens=128",
                            "--context=1k", "--shape", "qwen3.6-27b", "--threads", "1,2"});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(f.contexts, (std::vector<int64_t>{32768, 65536, 1024}));  // first use replaces default, then appends
  EXPECT_EQ(f.threads, (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(f.budget_gib, 80.5);
  EXPECT_TRUE(f.json);
  EXPECT_EQ(f.page_tokens, 128);
  EXPECT_EQ(f.shape, "qwen3.6-27b");
  EXPECT_EQ(f.preset, "qwen3.6-27b");  // untouched default
  EXPECT_TRUE(p.WasSet("budget-gib"));
  EXPECT_FALSE(p.WasSet("preset"));
  EXPECT_FALSE(p.help_requested());

  Flags g;
  ArgParser q = MakeParser(&g);
  ASSERT_TRUE(q.Parse({"--json=false", "--help"}).ok());
  EXPECT_FALSE(g.json);
  EXPECT_TRUE(q.help_requested());
}

TEST(ArgParser, ErrorsNameTheFlagAndTheValue) {
  struct Case {
    std::vector<std::string> args;
    const char* expected_substring;
  };
  const Case cases[] = {
      {{"--contxt", "1"}, "unknown flag --contxt (did you mean --context?)"},
      {{"--zzzzzzzzzz"}, "unknown flag --zzzzzzzzzz; see minimakv plan --help"},
      {{"--context"}, "flag --context needs a value"},
      {{"--context", "32768,abc"}, "bad value for --context: '32768,abc' is not a comma-separated list"},
      {{"--budget-gib", "lots"}, "bad value for --budget-gib: 'lots' is not a finite number"},
      {{"--budget-gib=inf"}, "'inf' is not a finite number"},
      {{"--page-tokens", "12x"}, "bad value for --page-tokens: '12x' is not an integer"},
      {{"--page-tokens", "99999999999"}, "out of range"},
      {{"--json=maybe"}, "'maybe' is not true or false"},
      {{"--shape", "gpt"}, "'gpt' is not one of llama-3.1-8b|qwen3.6-27b"},
      {{"extra"}, "unexpected argument 'extra'"},
  };
  for (const Case& c : cases) {
    Flags f;
    ArgParser p = MakeParser(&f);
    const Status s = p.Parse(c.args);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_NE(s.message().find(c.expected_substring), std::string::npos) << s.message();
  }
}

TEST(ArgParser, HelpListsEveryFlagWithItsDefault) {
  Flags f;
  ArgParser p = MakeParser(&f);
  p.SetEpilog("Example: minimakv plan --json");
  const std::string help = p.Help();
  EXPECT_NE(help.find("Usage: minimakv plan [flags]"), std::string::npos);
  EXPECT_NE(help.find("--context N[,N...]"), std::string::npos);
  EXPECT_NE(help.find("(default: 32768)"), std::string::npos);
  EXPECT_NE(help.find("(default: 86.4)"), std::string::npos);
  EXPECT_NE(help.find("--json "), std::string::npos);
  EXPECT_NE(help.find("-h, --help"), std::string::npos);
  EXPECT_NE(help.find("Example: minimakv plan --json"), std::string::npos);
  EXPECT_EQ(help.find("print JSON (default"), std::string::npos);  // off-by-default switch: no default shown

  bool flush = true;
  ArgParser on("minimakv bench", "Bench.");
  on.AddBool("flush-caches", "flush", &flush);
  EXPECT_NE(on.Help().find("--flush-caches  flush (default: true)"), std::string::npos) << on.Help();
  ASSERT_TRUE(on.Parse({"--flush-caches=false"}).ok());
  EXPECT_FALSE(flush);
}

TEST(ArgParser, ValueParsers) {
  int64_t v = 0;
  ASSERT_TRUE(ParseInt64Value("32k", &v).ok());
  EXPECT_EQ(v, 32768);
  ASSERT_TRUE(ParseInt64Value("-3", &v).ok());
  EXPECT_EQ(v, -3);
  EXPECT_FALSE(ParseInt64Value("", &v).ok());
  EXPECT_FALSE(ParseInt64Value("k", &v).ok());
  EXPECT_FALSE(ParseInt64Value("9223372036854775807k", &v).ok());
  std::vector<int64_t> list;
  EXPECT_FALSE(ParseInt64ListValue("1,,2", &list).ok());
  EXPECT_FALSE(ParseInt64ListValue("1,", &list).ok());
  // An integer too large says so, alone or in a list (was: "is not an integer").
  EXPECT_NE(ParseInt64Value("99999999999999999999", &v).message().find("out of range"), std::string::npos);
  const Status s = ParseInt64ListValue("1,9007199254740993k", &list);
  EXPECT_NE(s.message().find("'9007199254740993k' is out of range"), std::string::npos) << s.message();
  EXPECT_NE(ParseInt64ListValue("1,x", &list).message().find("'x' is not an integer"), std::string::npos);
}

TEST(ProgressLine, FormatsElapsedPercentAndEta) {
  EXPECT_EQ(ProgressLine::FormatLine("bench", 2.0, 0.25, "fp8"), "bench [2.0s]  25% ETA 6s: fp8");
  EXPECT_EQ(ProgressLine::FormatLine("bench", 1.25, -1.0, "bf16"), "bench [1.2s]: bf16");
  EXPECT_EQ(ProgressLine::FormatLine("bench", 3.0, 1.0, ""), "bench [3.0s] 100%");
}

TEST(ProgressLine, PlainLinesOffATerminalAreThrottledAndOffMeansSilent) {
  std::FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  {
    ProgressLine progress("bench", ProgressLine::Mode::kAuto, log);  // a file is not a TTY: plain lines
    progress.Update("first");
    progress.Update("second");  // within kMinLogIntervalSeconds of the first: dropped
    progress.Update(1.0, "done");  // final step: always printed
  }
  ProgressLine silent("bench", ProgressLine::Mode::kOff, log);
  silent.Update(1.0, "never");
  std::rewind(log);
  char buffer[256] = {};
  const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, log);
  std::fclose(log);
  const std::string text(buffer, n);
  EXPECT_NE(text.find(": first\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("second"), std::string::npos) << text;
  EXPECT_NE(text.find("100%: done\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("never"), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;  // no terminal redraw codes in logs
}

}  // namespace
}  // namespace minimakv
