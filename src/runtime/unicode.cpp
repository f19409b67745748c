#include <algorithm>

#include "runtime/unicode_tables.h"

namespace minimakv {
namespace {

bool InRanges(const CodepointRange* ranges, size_t count, uint32_t cp) {
  const CodepointRange* end = ranges + count;
  const CodepointRange* it =
      std::upper_bound(ranges, end, cp, [](uint32_t c, const CodepointRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

constexpr uint32_t kReplacementCharacter = 0xFFFD;
constexpr uint32_t kMaxCodepoint = 0x10FFFF;

}  // namespace

bool IsUnicodeLetter(uint32_t cp) { return InRanges(kLetterRanges, kLetterRangesCount, cp); }
bool IsUnicodeNumber(uint32_t cp) { return InRanges(kNumberRanges, kNumberRangesCount, cp); }

bool IsUnicodeWhitespace(uint32_t cp) {
  // ref: Unicode PropList.txt, White_Space (the set llama.cpp's unicode-data.cpp uses for \s).
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::vector<uint32_t> DecodeUtf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    int extra = -1;
    uint32_t cp = 0;
    if (b < 0x80) { extra = 0; cp = b; }
    else if ((b & 0xE0) == 0xC0) { extra = 1; cp = b & 0x1F; }
    else if ((b & 0xF0) == 0xE0) { extra = 2; cp = b & 0x0F; }
    else if ((b & 0xF8) == 0xF0) { extra = 3; cp = b & 0x07; }
    bool valid = extra >= 0 && i + size_t(extra) < n;
    for (int k = 1; valid && k <= extra; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) valid = false;
      else cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (valid && cp > kMaxCodepoint) valid = false;
    if (!valid) {  // one replacement character per bad byte, as llama.cpp's unicode_cpts_from_utf8
      out.push_back(kReplacementCharacter);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += size_t(extra) + 1;
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace minimakv
