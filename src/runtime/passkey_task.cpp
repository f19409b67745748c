#include "minimakv/passkey_task.h"

#include <random>

namespace minimakv {
namespace {

constexpr const char* kIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you "
    "about the important information there.\n\n";
constexpr const char* kFiller = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
constexpr const char* kQuestion = "\nWhat is the pass key? The pass key is";
constexpr int kPasskeyDigits = 5;

}  // namespace

std::string FirstDigits(const std::string& answer) {
  std::string digits;
  for (char ch : answer) {
    if (ch >= '0' && ch <= '9') digits.push_back(ch);
    else if (!digits.empty()) break;
  }
  return digits;
}

Status BuildPasskeyCase(const Tokenizer& tokenizer, int64_t context_tokens, double depth, uint64_t seed,
                        PasskeyCase* out) {
  if (!(depth >= 0.0 && depth <= 1.0)) return Status::InvalidArgument("passkey depth " + std::to_string(depth) + " not in [0, 1]");
  // Checked before the filler text (about 5 bytes a token) is built.
  if (context_tokens > kMaxPasskeyContextTokens) {
    return Status::InvalidArgument("passkey context " + std::to_string(context_tokens) + " tokens exceeds 2^24");
  }
  std::mt19937_64 rng(seed);
  std::string key;
  key.push_back(char('1' + rng() % 9));  // no leading zero
  for (int i = 1; i < kPasskeyDigits; ++i) key.push_back(char('0' + rng() % 10));
  const std::string needle = "The pass key is " + key + ". Remember it. " + key + " is the pass key. ";

  auto count = [&](const std::string& text, bool special) {
    std::vector<int32_t> ids;
    tokenizer.Encode(text, special, &ids);
    return int64_t(ids.size());
  };
  auto render = [&](int64_t fillers_before, int64_t fillers_after, std::string* text) -> Status {
    std::string body = kIntro;
    for (int64_t i = 0; i < fillers_before; ++i) body += kFiller;
    body += needle;
    for (int64_t i = 0; i < fillers_after; ++i) body += kFiller;
    body += kQuestion;
    *text = std::move(body);
    return Status::Ok();
  };
  std::string frame;
  MINIMAKV_RETURN_IF_ERROR(render(0, 0, &frame));
  const int64_t frame_tokens = count(frame, true);
  const int64_t filler_tokens = count(kFiller, false);
  if (context_tokens < frame_tokens + filler_tokens) {
    return Status::InvalidArgument("passkey context " + std::to_string(context_tokens) + " tokens is below the " +
                                   std::to_string(frame_tokens + filler_tokens) + "-token frame");
  }
  int64_t fillers = (context_tokens - frame_tokens) / filler_tokens;
  std::string text;
  while (true) {  // filler repeats tokenize the same way each time, so this settles within a step or two
    const int64_t before = int64_t(double(fillers) * depth + 0.5);
    MINIMAKV_RETURN_IF_ERROR(render(before, fillers - before, &text));
    out->prompt_ids.clear();
    if (tokenizer.add_bos() && tokenizer.bos_id() >= 0) out->prompt_ids.push_back(tokenizer.bos_id());
    tokenizer.Encode(text, true, &out->prompt_ids);
    if (int64_t(out->prompt_ids.size()) <= context_tokens || fillers == 0) {
      out->needle_token = count(text.substr(0, text.find(needle)), true);
      break;
    }
    --fillers;
  }
  out->passkey = key;
  return Status::Ok();
}

}  // namespace minimakv
