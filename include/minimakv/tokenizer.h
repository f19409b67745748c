// Tokenizer: byte-level BPE (GPT-2 style, tokenizer.ggml.model = "gpt2") built from a GGUF file's metadata:
// tokenizer.ggml.tokens / merges / token_type, bos/eos ids and the pre-tokenizer named by
// tokenizer.ggml.pre. Reproduces llama.cpp's llama_tokenize for the supported pre-tokenizers, checked against
// ids llama.cpp produced (tests/fixtures/smollm2_tokens.json).
//
// Pre-tokenizers (the split rules are hand-written, no regex engine):
//   "gpt2"    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   "smollm"  (also "starcoder", "refact"): every \p{N} code point split off alone first, then "gpt2" on each
//             piece (llama.cpp llama-vocab.cpp groups SMOLLM with STARCODER).
//   "qwen2"   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
//             \s+(?!\S)|\s+   (Qwen2 / Qwen2.5 tokenizer.json; llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN2)
//   "llama-bpe" (Llama 3): the same with \p{N}{1,3}, and a word that is itself a vocabulary token is emitted
//             whole without merges (llama.cpp sets ignore_merges for LLAMA3).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "minimakv/gguf_reader.h"
#include "minimakv/status.h"

namespace minimakv {

// Token types, ids as in llama.cpp's llama_token_type / tokenizer.ggml.token_type.
enum class TokenType : int32_t { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
                                 kUnused = 5, kByte = 6 };

enum class PreTokenizer { kGpt2, kDigitsThenGpt2, kQwen2, kLlama3 };

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  // Unsupported for a tokenizer model other than "gpt2" or an unknown pre-tokenizer name; Corruption when
  // the arrays disagree in length or an id is out of range.
  static Status FromGguf(const GgufFile& file, std::unique_ptr<Tokenizer>* out);

  // Encodes UTF-8 text. With parse_special, control and user-defined token texts in `text` become their ids
  // (llama.cpp's parse_special=true); user-defined tokens are always matched. No BOS is added here: callers
  // add bos_id() when add_bos() says so.
  void Encode(std::string_view text, bool parse_special, std::vector<int32_t>* ids) const;
  // The bytes a token stands for. Control tokens give their text only when render_special.
  std::string Decode(int32_t id, bool render_special = false) const;
  std::string DecodeAll(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_; }
  const std::string& token_text(int32_t id) const { return tokens_[size_t(id)]; }
  TokenType token_type(int32_t id) const { return types_[size_t(id)]; }
  // True for ids that end a generated reply: eos and the chat template's end-of-turn token (<|im_end|>).
  bool IsEndOfGeneration(int32_t id) const;
  PreTokenizer pre_tokenizer() const { return pre_; }

  // Renders messages with the model's chat template. Supported: ChatML (<|im_start|>role\n...<|im_end|>\n),
  // including a default system message when the template inserts one (SmolLM2 and Qwen2.5 do). Unsupported otherwise.
  Status ApplyChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           std::string* out) const;

  // Exposed for tests: the pre-tokenizer's split of `text` into words (no special-token handling).
  std::vector<std::string> PreTokenize(std::string_view text) const;

 private:
  void EncodeWord(const std::string& word, std::vector<int32_t>* ids) const;

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t> token_ids_;
  std::unordered_map<std::string, int32_t> merge_ranks_;  // "left right" -> rank (lower merges first)
  std::vector<int32_t> special_ids_;                      // control + user-defined, longest text first
  std::string byte_to_symbol_[256];                       // GPT-2 byte -> printable code point, as UTF-8
  std::unordered_map<uint32_t, uint8_t> symbol_to_byte_;
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t end_of_turn_id_ = -1;
  bool add_bos_ = false;
  bool chatml_ = false;
  std::string default_system_block_;  // rendered text the template inserts when there is no system message
};

}  // namespace minimakv
