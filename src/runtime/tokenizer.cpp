#include "minimakv/tokenizer.h"

#include <algorithm>
#include <queue>

#include "runtime/unicode_tables.h"

namespace minimakv {
namespace {

// GPT-2's byte -> code point map: bytes that are printable Latin-1 map to themselves, the others (controls,
// space, 0x7F-0xA0, soft hyphen 0xAD) to 256, 257, ... in byte order. ref: openai/gpt-2 encoder.py
// bytes_to_unicode (the scheme, reimplemented).
uint32_t ByteToCodepoint(int byte, int* next_extra) {
  const bool printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
  if (printable) return uint32_t(byte);
  return uint32_t(256 + (*next_extra)++);
}

// Digits per number piece: Qwen2 splits every digit alone (\p{N}), Llama 3 takes up to three (\p{N}{1,3}).
constexpr int kQwen2MaxDigits = 1;
constexpr int kLlama3MaxDigits = 3;

struct Flags {
  bool letter = false, number = false, space = false, in_range = false;
};

// The GPT-2 split rule over code points [begin, end) (one piece from the previous stage), appending word
// boundaries. Mirrors the regex alternatives in order; a position past `end` has no class (the regex cannot
// look beyond the piece).
void SplitGpt2(const std::vector<uint32_t>& cps, size_t begin, size_t end, std::vector<size_t>* cuts) {
  auto flags = [&](size_t pos) {
    Flags f;
    if (pos < begin || pos >= end) return f;
    const uint32_t c = cps[pos];
    f.in_range = true;
    f.letter = IsUnicodeLetter(c);
    f.number = !f.letter && IsUnicodeNumber(c);
    f.space = IsUnicodeWhitespace(c);
    return f;
  };
  auto cp = [&](size_t pos) -> uint32_t { return pos < end ? cps[pos] : 0xFFFFFFFFu; };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t c = cps[pos];
    // 's|'t|'re|'ve|'m|'ll|'d  (case-sensitive, as in GPT-2)
    if (c == '\'' && pos + 1 < end) {
      const uint32_t n1 = cp(pos + 1);
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        pos += 2;
        cuts->push_back(pos);
        continue;
      }
      if (pos + 2 < end) {
        const uint32_t n2 = cp(pos + 2);
        if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
          pos += 3;
          cuts->push_back(pos);
          continue;
        }
      }
    }
    // An optional leading U+0020 joins the class of the code point after it.
    const Flags f = c == ' ' ? flags(pos + 1) : flags(pos);
    if (f.letter || f.number) {  //  ?\p{L}+   and    ?\p{N}+
      const bool letter = f.letter;
      pos += (c == ' ');
      while (pos < end && (letter ? flags(pos).letter : flags(pos).number)) ++pos;
      cuts->push_back(pos);
      continue;
    }
    if (f.in_range && !f.space) {  //  ?[^\s\p{L}\p{N}]+
      pos += (c == ' ');
      while (true) {
        const Flags g = flags(pos);
        if (!g.in_range || g.space || g.letter || g.number) break;
        ++pos;
      }
      cuts->push_back(pos);
      continue;
    }
    size_t spaces = 0;
    while (flags(pos + spaces).space) ++spaces;
    if (spaces > 1 && pos + spaces < end) {  // \s+(?!\S): leave the last space to the next word
      pos += spaces - 1;
      cuts->push_back(pos);
      continue;
    }
    if (spaces > 0) {  // \s+
      pos += spaces;
      cuts->push_back(pos);
      continue;
    }
    cuts->push_back(++pos);  // unreachable for valid code points; keeps the loop total
  }
}


// The Qwen2 / Llama 3 split rule over code points [begin, end), appending word boundaries. Mirrors the regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// alternative by alternative, in order (leftmost alternative that matches wins, each quantifier greedy).
// max_digits is 1 for qwen2 and 3 for llama-bpe. ref: Qwen2.5 tokenizer.json, llama.cpp llama-vocab.cpp (the
// regexes; the matching is reimplemented by hand).
void SplitQwen2Style(const std::vector<uint32_t>& cps, size_t begin, size_t end, int max_digits,
                     std::vector<size_t>* cuts) {
  auto letter = [&](size_t p) { return p < end && IsUnicodeLetter(cps[p]); };
  auto number = [&](size_t p) { return p < end && !IsUnicodeLetter(cps[p]) && IsUnicodeNumber(cps[p]); };
  auto space = [&](size_t p) { return p < end && IsUnicodeWhitespace(cps[p]); };
  auto newline = [&](size_t p) { return p < end && (cps[p] == '\r' || cps[p] == '\n'); };
  auto lower = [&](size_t p) -> uint32_t {
    if (p >= end) return 0;
    const uint32_t c = cps[p];
    return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
  };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t c = cps[pos];
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c == '\'') {
      const uint32_t n1 = lower(pos + 1), n2 = lower(pos + 2);
      size_t len = 0;
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') len = 2;
      else if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) len = 3;
      if (len > 0) {
        pos += len;
        cuts->push_back(pos);
        continue;
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    const bool prefix_ok = !letter(pos) && !number(pos) && !newline(pos);
    if (letter(pos) || (prefix_ok && letter(pos + 1))) {
      pos += letter(pos) ? 0 : 1;
      while (letter(pos)) ++pos;
      cuts->push_back(pos);
      continue;
    }
    // \p{N}{1,max_digits}
    if (number(pos)) {
      for (int n = 0; n < max_digits && number(pos); ++n) ++pos;
      cuts->push_back(pos);
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    auto symbol = [&](size_t p) { return p < end && !space(p) && !letter(p) && !number(p); };
    if (symbol(pos) || (c == ' ' && symbol(pos + 1))) {
      pos += (c == ' ');
      while (symbol(pos)) ++pos;
      while (newline(pos)) ++pos;
      cuts->push_back(pos);
      continue;
    }
    // Whitespace from here on (every other code point matched above).
    size_t run = 0;
    while (space(pos + run)) ++run;
    size_t last_newline = run;  // index in the run of its last \r or \n; `run` when there is none
    for (size_t i = 0; i < run; ++i) {
      if (newline(pos + i)) last_newline = i;
    }
    if (last_newline < run) {  // \s*[\r\n]+: the greedy \s* backs off to the run's last line break
      pos += last_newline + 1;
    } else if (run > 1 && pos + run < end) {  // \s+(?!\S): leave the last space to the next word
      pos += run - 1;
    } else {  // \s+
      pos += std::max<size_t>(run, 1);
    }
    cuts->push_back(pos);
  }
}

}  // namespace

Status Tokenizer::FromGguf(const GgufFile& file, std::unique_ptr<Tokenizer>* out) {
  std::string model;
  MINIMAKV_RETURN_IF_ERROR(file.GetString("tokenizer.ggml.model", &model));
  if (model != "gpt2") {
    return Status::Unsupported("tokenizer model '" + model + "' (only byte-level BPE, \"gpt2\", is supported)");
  }
  auto tok = std::make_unique<Tokenizer>();
  std::string pre = "default";
  if (file.Find("tokenizer.ggml.pre") != nullptr) MINIMAKV_RETURN_IF_ERROR(file.GetString("tokenizer.ggml.pre", &pre));
  if (pre == "gpt2" || pre == "default") {
    tok->pre_ = PreTokenizer::kGpt2;
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    tok->pre_ = PreTokenizer::kDigitsThenGpt2;
  } else if (pre == "qwen2") {
    tok->pre_ = PreTokenizer::kQwen2;
  } else if (pre == "llama-bpe" || pre == "llama3") {
    tok->pre_ = PreTokenizer::kLlama3;
  } else {
    return Status::Unsupported("pre-tokenizer '" + pre +
                               "' (supported: gpt2, default, smollm, starcoder, refact, qwen2, llama-bpe)");
  }

  const std::vector<std::string>* tokens = nullptr;
  MINIMAKV_RETURN_IF_ERROR(file.GetStringArray("tokenizer.ggml.tokens", &tokens));
  if (tokens->empty()) return Status::Corruption("tokenizer.ggml.tokens is empty");
  tok->tokens_ = *tokens;
  const size_t n = tokens->size();
  tok->types_.assign(n, TokenType::kNormal);
  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    std::vector<int64_t> types;
    MINIMAKV_RETURN_IF_ERROR(file.GetIntArray("tokenizer.ggml.token_type", &types));
    if (types.size() != n) {
      return Status::Corruption("tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                                " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) tok->types_[i] = TokenType(int32_t(types[i]));
  }
  tok->token_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) tok->token_ids_.emplace(tok->tokens_[i], int32_t(i));  // first id wins

  const std::vector<std::string>* merges = nullptr;
  MINIMAKV_RETURN_IF_ERROR(file.GetStringArray("tokenizer.ggml.merges", &merges));
  tok->merge_ranks_.reserve(merges->size());
  for (size_t r = 0; r < merges->size(); ++r) {
    const std::string& m = (*merges)[r];
    const size_t space = m.find(' ', 1);  // the left part is never empty; a left part can't contain ' '
    if (space == std::string::npos) {
      return Status::Corruption("tokenizer merge " + std::to_string(r) + " '" + m + "' has no separating space");
    }
    tok->merge_ranks_.emplace(m, int32_t(r));
  }

  auto id_key = [&](const char* key, int32_t* id) -> Status {
    if (file.Find(key) == nullptr) return Status::Ok();
    uint32_t v = 0;
    MINIMAKV_RETURN_IF_ERROR(file.GetUint32(key, &v));
    if (v >= n) return Status::Corruption(std::string(key) + " = " + std::to_string(v) + " is not a token id");
    *id = int32_t(v);
    return Status::Ok();
  };
  MINIMAKV_RETURN_IF_ERROR(id_key("tokenizer.ggml.bos_token_id", &tok->bos_id_));
  MINIMAKV_RETURN_IF_ERROR(id_key("tokenizer.ggml.eos_token_id", &tok->eos_id_));
  if (file.Find("tokenizer.ggml.add_bos_token") != nullptr) {
    MINIMAKV_RETURN_IF_ERROR(file.GetBool("tokenizer.ggml.add_bos_token", &tok->add_bos_));
  }

  for (size_t i = 0; i < n; ++i) {
    if (tok->types_[i] == TokenType::kControl || tok->types_[i] == TokenType::kUserDefined) {
      if (!tok->tokens_[i].empty()) tok->special_ids_.push_back(int32_t(i));
    }
  }
  // Longest first, as llama.cpp's special-token partition; ties keep id order.
  std::stable_sort(tok->special_ids_.begin(), tok->special_ids_.end(), [&](int32_t a, int32_t b) {
    return tok->tokens_[size_t(a)].size() > tok->tokens_[size_t(b)].size();
  });

  int next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = ByteToCodepoint(b, &next_extra);
    AppendUtf8(cp, &tok->byte_to_symbol_[b]);
    tok->symbol_to_byte_[cp] = uint8_t(b);
  }

  auto it = tok->token_ids_.find("<|im_end|>");
  if (it != tok->token_ids_.end()) tok->end_of_turn_id_ = it->second;
  if (file.Find("tokenizer.chat_template") != nullptr) {
    std::string tmpl;
    MINIMAKV_RETURN_IF_ERROR(file.GetString("tokenizer.chat_template", &tmpl));
    tok->chatml_ = tmpl.find("<|im_start|>") != std::string::npos;
    // SmolLM2's template inserts a fixed system turn when the first message is not a system message:
    //   {% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n...<|im_end|>\n' }}
    const std::string marker = "messages[0]['role'] != 'system' %}{{ '";
    const size_t at = tmpl.find(marker);
    if (tok->chatml_ && at != std::string::npos) {
      const size_t begin = at + marker.size();
      const size_t end = tmpl.find("' }}", begin);
      if (end != std::string::npos) tok->default_system_block_ = tmpl.substr(begin, end - begin);
    }
    // Qwen2.5's template prints its default system turn as one string literal, with escaped line breaks:
    //   {%- else %}{{- '<|im_start|>system\nYou are Qwen, ...<|im_end|>\n' }}
    // Take the first '<|im_start|>system ...' literal that is a whole turn and is printed alone.
    std::string unescaped;
    for (size_t i = 0; i < tmpl.size(); ++i) {
      if (tmpl[i] == '\\' && i + 1 < tmpl.size() && tmpl[i + 1] == 'n') {
        unescaped.push_back('\n');
        ++i;
      } else {
        unescaped.push_back(tmpl[i]);
      }
    }
    const std::string turn_start = "'<|im_start|>system\n", turn_end = "<|im_end|>\n", printed_alone = "' }}";
    for (size_t from = 0; tok->chatml_ && tok->default_system_block_.empty();) {
      const size_t open = unescaped.find(turn_start, from);
      if (open == std::string::npos) break;
      const size_t close = unescaped.find('\'', open + 1);
      if (close == std::string::npos) break;
      const std::string literal = unescaped.substr(open + 1, close - open - 1);
      if (literal.size() >= turn_end.size() &&
          literal.compare(literal.size() - turn_end.size(), turn_end.size(), turn_end) == 0 &&
          unescaped.compare(close, printed_alone.size(), printed_alone) == 0) {
        tok->default_system_block_ = literal;
      }
      from = close + 1;
    }
  }
  *out = std::move(tok);
  return Status::Ok();
}

std::vector<std::string> Tokenizer::PreTokenize(std::string_view text) const {
  const std::vector<uint32_t> cps = DecodeUtf8(text);
  // Stage 1 (smollm/starcoder): every number code point is a piece of its own; the rest stays in runs.
  std::vector<std::pair<size_t, size_t>> pieces;
  if (pre_ == PreTokenizer::kDigitsThenGpt2) {
    size_t start = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      if (IsUnicodeNumber(cps[i]) && !IsUnicodeLetter(cps[i])) {
        if (i > start) pieces.emplace_back(start, i);
        pieces.emplace_back(i, i + 1);
        start = i + 1;
      }
    }
    if (start < cps.size()) pieces.emplace_back(start, cps.size());
  } else {
    pieces.emplace_back(0, cps.size());
  }
  std::vector<std::string> words;
  std::vector<size_t> cuts;
  for (const auto& [begin, end] : pieces) {
    cuts.clear();
    if (pre_ == PreTokenizer::kQwen2 || pre_ == PreTokenizer::kLlama3) {
      SplitQwen2Style(cps, begin, end, pre_ == PreTokenizer::kQwen2 ? kQwen2MaxDigits : kLlama3MaxDigits, &cuts);
    } else {
      SplitGpt2(cps, begin, end, &cuts);
    }
    size_t prev = begin;
    for (size_t cut : cuts) {
      std::string w;
      for (size_t i = prev; i < cut; ++i) AppendUtf8(cps[i], &w);
      words.push_back(std::move(w));
      prev = cut;
    }
  }
  return words;
}

void Tokenizer::EncodeWord(const std::string& word, std::vector<int32_t>* ids) const {
  // Map bytes to GPT-2 symbols; the initial BPE symbols are single mapped characters.
  struct Symbol {
    std::string text;
    int prev, next;
    bool alive;
  };
  if (pre_ == PreTokenizer::kLlama3) {
    // llama.cpp's ignore_merges (set for LLAMA3): a word that is a vocabulary token is used as is.
    std::string mapped;
    for (char ch : word) mapped += byte_to_symbol_[uint8_t(ch)];
    auto it = token_ids_.find(mapped);
    if (it != token_ids_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    sym.push_back({byte_to_symbol_[uint8_t(word[i])], int(i) - 1, int(i) + 1, true});
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  // Min-heap of candidate merges ordered by (rank, left position): the lowest rank merges first and equal
  // ranks merge left to right, as llama.cpp's llm_tokenizer_bpe. Entries go stale when a side changes; a
  // popped entry is used only if both sides still have the texts it was made from.
  struct Candidate {
    int32_t rank;
    int left, right;
    size_t left_size, right_size;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  std::string key;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    key.assign(sym[size_t(left)].text);
    key.push_back(' ');
    key.append(sym[size_t(right)].text);
    auto it = merge_ranks_.find(key);
    if (it == merge_ranks_.end()) return;
    heap.push({it->second, left, right, sym[size_t(left)].text.size(), sym[size_t(right)].text.size()});
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) try_add(int(i), int(i) + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[size_t(c.left)];
    Symbol& r = sym[size_t(c.right)];
    if (!l.alive || !r.alive || l.next != c.right || l.text.size() != c.left_size || r.text.size() != c.right_size) {
      continue;
    }
    l.text += r.text;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = c.left;
    try_add(l.prev, c.left);
    try_add(c.left, l.next);
  }
  for (int i = 0; i >= 0; i = sym[size_t(i)].next) {
    const std::string& t = sym[size_t(i)].text;
    auto it = token_ids_.find(t);
    if (it != token_ids_.end()) {
      ids->push_back(it->second);
      continue;
    }
    // Not in the vocabulary: fall back to one token per mapped byte (each is a single UTF-8 character).
    size_t p = 0;
    while (p < t.size()) {
      const unsigned char lead = uint8_t(t[p]);
      const size_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      auto bt = token_ids_.find(t.substr(p, len));
      if (bt != token_ids_.end()) ids->push_back(bt->second);
      p += len;
    }
  }
}

void Tokenizer::Encode(std::string_view text, bool parse_special, std::vector<int32_t>* ids) const {
  // Fragments: raw text spans or special token ids. Each special token, longest first, splits every raw
  // fragment at its non-overlapping occurrences (llama.cpp tokenizer_st_partition).
  struct Fragment {
    int32_t id;  // -1 for raw text
    size_t begin, end;
  };
  std::vector<Fragment> frags{{-1, 0, text.size()}};
  for (int32_t sid : special_ids_) {
    if (!parse_special && types_[size_t(sid)] == TokenType::kControl) continue;
    const std::string& s = tokens_[size_t(sid)];
    std::vector<Fragment> next;
    next.reserve(frags.size());
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      while (true) {
        const size_t hit = text.substr(0, f.end).find(s, pos);
        if (hit == std::string_view::npos) break;
        if (hit > pos) next.push_back({-1, pos, hit});
        next.push_back({sid, hit, hit + s.size()});
        pos = hit + s.size();
      }
      if (pos < f.end) next.push_back({-1, pos, f.end});
    }
    frags.swap(next);
  }
  for (const Fragment& f : frags) {
    if (f.id >= 0) {
      ids->push_back(f.id);
      continue;
    }
    for (const std::string& word : PreTokenize(text.substr(f.begin, f.end - f.begin))) EncodeWord(word, ids);
  }
}

std::string Tokenizer::Decode(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size()) return std::string();
  const TokenType type = types_[size_t(id)];
  const std::string& t = tokens_[size_t(id)];
  if (type == TokenType::kControl) return render_special ? t : std::string();
  if (type == TokenType::kUserDefined) return t;
  std::string out;
  for (uint32_t cp : DecodeUtf8(t)) {
    auto it = symbol_to_byte_.find(cp);
    if (it != symbol_to_byte_.end()) out.push_back(char(it->second));
    else AppendUtf8(cp, &out);
  }
  return out;
}

std::string Tokenizer::DecodeAll(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += Decode(id, render_special);
  return out;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return (id >= 0 && id == eos_id_) || (id >= 0 && id == end_of_turn_id_);
}

Status Tokenizer::ApplyChatTemplate(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                    std::string* out) const {
  if (!chatml_) return Status::Unsupported("chat template: only ChatML (<|im_start|>) templates are supported");
  out->clear();
  if (!messages.empty() && messages[0].role != "system") *out += default_system_block_;
  for (const ChatMessage& m : messages) *out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) *out += "<|im_start|>assistant\n";
  return Status::Ok();
}

}  // namespace minimakv
