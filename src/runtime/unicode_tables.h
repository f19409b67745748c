// Unicode code point classes for the byte-level BPE pre-tokenizers (\p{L}, \p{N}, \s of the HF / llama.cpp
// split regexes). Letter and number ranges are generated (scripts/gen_unicode_tables.py); whitespace is the
// Unicode White_Space property, listed by hand in unicode.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace minimakv {

struct CodepointRange {
  uint32_t first;
  uint32_t last;  // inclusive
};
extern const CodepointRange kLetterRanges[];
extern const size_t kLetterRangesCount;
extern const CodepointRange kNumberRanges[];
extern const size_t kNumberRangesCount;

bool IsUnicodeLetter(uint32_t cp);  // general category L*
bool IsUnicodeNumber(uint32_t cp);  // general category N*
bool IsUnicodeWhitespace(uint32_t cp);  // White_Space property (PropList.txt)

// Decodes UTF-8 into code points; each byte of an invalid sequence becomes U+FFFD (as llama.cpp does).
std::vector<uint32_t> DecodeUtf8(std::string_view text);
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace minimakv
