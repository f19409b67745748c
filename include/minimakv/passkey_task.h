// Passkey retrieval (needle in a haystack): a random 5-digit key hidden at a chosen depth inside repeated
// filler text, then asked for. The prompt format follows the passkey test of Landmark Attention
// (arXiv 2305.16300) and LongLoRA, as plain text ending in "The pass key is", so a model that found the key only
// has to copy its digits. Plain text, not the chat template: through SmolLM2-135M-Instruct's template both we
// and llama.cpp get generic answers beyond ~512 tokens, while the plain prompt is answered at 1K-2K+ tokens
// (checked with llama.cpp on the same GGUF).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minimakv/status.h"
#include "minimakv/tokenizer.h"

namespace minimakv {

struct PasskeyCase {
  std::vector<int32_t> prompt_ids;  // ready for the model (BOS added when the model asks for it)
  std::string passkey;              // 5 digits
  int64_t needle_token = 0;         // token position where the needle starts
};

// Builds a prompt of about `context_tokens` tokens (never more) with the needle at `depth` in [0, 1] of the
// filler. The key is drawn from `seed`. InvalidArgument if context_tokens is too small for the frame (~100) or
// above kMaxPasskeyContextTokens.
inline constexpr int64_t kMaxPasskeyContextTokens = int64_t(1) << 24;
Status BuildPasskeyCase(const Tokenizer& tokenizer, int64_t context_tokens, double depth, uint64_t seed,
                        PasskeyCase* out);

// The first run of digits in `answer` (empty if none).
std::string FirstDigits(const std::string& answer);

}  // namespace minimakv
