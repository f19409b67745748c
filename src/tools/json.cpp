#include "tools/json.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace minimakv {

bool JsonValue::GetInt64(int64_t* out) const {
  if (type_ != Type::kNumber) return false;
  if (is_integer_) {
    *out = integer_;
    return true;
  }
  // 2^63 as a double: the first value outside int64's range.
  constexpr double kTwoPow63 = 9223372036854775808.0;
  if (!std::isfinite(number_) || number_ != std::floor(number_) || number_ < -kTwoPow63 || number_ >= kTwoPow63) {
    return false;
  }
  *out = int64_t(number_);
  return true;
}

JsonValue& JsonValue::Append(JsonValue value) {
  items_.push_back(std::move(value));
  return items_.back();
}

JsonValue& JsonValue::Set(std::string key, JsonValue value) {
  for (Member& m : members_) {
    if (m.first == key) {
      m.second = std::move(value);
      return m.second;
    }
  }
  members_.emplace_back(std::move(key), std::move(value));
  return members_.back().second;
}

const JsonValue* JsonValue::Find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

void AppendJsonString(std::string_view text, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (u < 0x20) {  // RFC 8259 section 7: control characters must be escaped
          out->append("\\u00");
          out->push_back(kHex[u >> 4]);
          out->push_back(kHex[u & 0xF]);
        } else {
          out->push_back(c);  // UTF-8 bytes pass through unchanged
        }
    }
  }
  out->push_back('"');
}

namespace {

void AppendNewline(std::string* out, int indent_spaces, int depth) {
  if (indent_spaces <= 0) return;
  out->push_back('\n');
  out->append(size_t(indent_spaces) * depth, ' ');
}

void AppendNumber(double value, std::string* out) {
  if (!std::isfinite(value)) {
    out->append("null");
    return;
  }
  char buffer[64];
  // Shortest representation that reads back to the same double (C++17 <charconv>).
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, result.ptr);
}

}  // namespace

void JsonValue::DumpTo(std::string* out, int indent_spaces, int depth) const {
  switch (type_) {
    case Type::kNull: out->append("null"); return;
    case Type::kBool: out->append(bool_ ? "true" : "false"); return;
    case Type::kNumber:
      if (is_integer_) {
        out->append(std::to_string(integer_));
      } else {
        AppendNumber(number_, out);
      }
      return;
    case Type::kString: AppendJsonString(string_, out); return;
    case Type::kArray:
      out->push_back('[');
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendNewline(out, indent_spaces, depth + 1);
        items_[i].DumpTo(out, indent_spaces, depth + 1);
      }
      if (!items_.empty()) AppendNewline(out, indent_spaces, depth);
      out->push_back(']');
      return;
    case Type::kObject:
      out->push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendNewline(out, indent_spaces, depth + 1);
        AppendJsonString(members_[i].first, out);
        out->append(indent_spaces > 0 ? ": " : ":");
        members_[i].second.DumpTo(out, indent_spaces, depth + 1);
      }
      if (!members_.empty()) AppendNewline(out, indent_spaces, depth);
      out->push_back('}');
      return;
  }
}

std::string JsonValue::Dump(int indent_spaces) const {
  std::string out;
  DumpTo(&out, indent_spaces, 0);
  return out;
}

namespace {

// Recursive-descent parser over the bytes of the text; every error names its byte offset.
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  Status ParseDocument(JsonValue* out) {
    SkipWhitespace();
    MINIMAKV_RETURN_IF_ERROR(ParseValue(out, 0));
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("end of input after the top-level value");
    return Status::Ok();
  }

 private:
  Status Error(std::string_view expected) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string found = "end of input";
    if (pos_ < text_.size() && static_cast<unsigned char>(text_[pos_]) < 0x20) {
      found = "control byte ";
      found += std::to_string(static_cast<unsigned char>(text_[pos_]));
    } else if (pos_ < text_.size()) {
      found = {'\'', text_[pos_], '\''};
    }
    return Status::InvalidArgument("JSON parse error at byte " + std::to_string(pos_) + " (line " +
                                   std::to_string(line) + ", column " + std::to_string(column) + "): expected " +
                                   std::string(expected) + ", found " + found);
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipWhitespace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool ConsumeLiteral(std::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  Status ParseValue(JsonValue* out, int depth) {
    if (depth > kMaxJsonDepth) return Error("nesting depth <= " + std::to_string(kMaxJsonDepth));
    switch (Peek()) {
      case '{': return ParseObject(out, depth);
      case '[': return ParseArray(out, depth);
      case '"': {
        std::string s;
        MINIMAKV_RETURN_IF_ERROR(ParseString(&s));
        *out = JsonValue(std::move(s));
        return Status::Ok();
      }
      case 't':
        if (ConsumeLiteral("true")) { *out = JsonValue(true); return Status::Ok(); }
        break;
      case 'f':
        if (ConsumeLiteral("false")) { *out = JsonValue(false); return Status::Ok(); }
        break;
      case 'n':
        if (ConsumeLiteral("null")) { *out = JsonValue(); return Status::Ok(); }
        break;
      default:
        if (Peek() == '-' || (Peek() >= '0' && Peek() <= '9')) return ParseNumber(out);
    }
    return Error("a JSON value (object, array, string, number, true, false or null)");
  }

  Status ParseObject(JsonValue* out, int depth) {
    *out = JsonValue::Object();
    ++pos_;  // '{'
    SkipWhitespace();
    if (Peek() == '}') {
      ++pos_;
      return Status::Ok();
    }
    while (true) {
      SkipWhitespace();
      if (Peek() != '"') return Error("a string key");
      std::string key;
      MINIMAKV_RETURN_IF_ERROR(ParseString(&key));
      SkipWhitespace();
      if (Peek() != ':') return Error("':' after an object key");
      ++pos_;
      SkipWhitespace();
      JsonValue value;
      MINIMAKV_RETURN_IF_ERROR(ParseValue(&value, depth + 1));
      out->Set(std::move(key), std::move(value));
      SkipWhitespace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return Status::Ok();
      }
      return Error("',' or '}' in an object");
    }
  }

  Status ParseArray(JsonValue* out, int depth) {
    *out = JsonValue::Array();
    ++pos_;  // '['
    SkipWhitespace();
    if (Peek() == ']') {
      ++pos_;
      return Status::Ok();
    }
    while (true) {
      SkipWhitespace();
      JsonValue value;
      MINIMAKV_RETURN_IF_ERROR(ParseValue(&value, depth + 1));
      out->Append(std::move(value));
      SkipWhitespace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return Status::Ok();
      }
      return Error("',' or ']' in an array");
    }
  }

  Status ParseHex4(uint32_t* code_unit) {
    *code_unit = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = Peek();
      uint32_t digit;
      if (c >= '0' && c <= '9') digit = uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') digit = uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') digit = uint32_t(c - 'A' + 10);
      else return Error("4 hex digits after \\u");
      *code_unit = (*code_unit << 4) | digit;
      ++pos_;
    }
    return Status::Ok();
  }

  static void AppendUtf8(uint32_t code_point, std::string* out) {
    if (code_point < 0x80) {
      out->push_back(char(code_point));
    } else if (code_point < 0x800) {
      out->push_back(char(0xC0 | (code_point >> 6)));
      out->push_back(char(0x80 | (code_point & 0x3F)));
    } else if (code_point < 0x10000) {
      out->push_back(char(0xE0 | (code_point >> 12)));
      out->push_back(char(0x80 | ((code_point >> 6) & 0x3F)));
      out->push_back(char(0x80 | (code_point & 0x3F)));
    } else {
      out->push_back(char(0xF0 | (code_point >> 18)));
      out->push_back(char(0x80 | ((code_point >> 12) & 0x3F)));
      out->push_back(char(0x80 | ((code_point >> 6) & 0x3F)));
      out->push_back(char(0x80 | (code_point & 0x3F)));
    }
  }

  Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    while (true) {
      if (AtEnd()) return Error("closing '\"' of a string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return Status::Ok();
      }
      if (static_cast<unsigned char>(c) < 0x20) return Error("no raw control characters inside a string");
      if (c != '\\') {
        out->push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;  // backslash
      const char e = Peek();
      ++pos_;
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t unit;
          MINIMAKV_RETURN_IF_ERROR(ParseHex4(&unit));
          // UTF-16 surrogate pair (RFC 8259 section 7): a high surrogate must be followed by \u + low surrogate.
          if (unit >= 0xD800 && unit <= 0xDBFF) {
            if (!ConsumeLiteral("\\u")) return Error("a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            uint32_t low;
            MINIMAKV_RETURN_IF_ERROR(ParseHex4(&low));
            if (low < 0xDC00 || low > 0xDFFF) {
              pos_ -= 4;
              return Error("a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            }
            unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
          } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
            pos_ -= 4;
            return Error("a high surrogate before a low surrogate");
          }
          AppendUtf8(unit, out);
          break;
        }
        default:
          pos_ -= 1;
          return Error("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
  }

  Status ParseNumber(JsonValue* out) {
    const size_t start = pos_;
    bool integral = true;
    if (Peek() == '-') ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (Peek() >= '1' && Peek() <= '9') {
      while (Peek() >= '0' && Peek() <= '9') ++pos_;
    } else {
      return Error("a digit in a number");
    }
    if (Peek() == '.') {
      integral = false;
      ++pos_;
      if (!(Peek() >= '0' && Peek() <= '9')) return Error("a digit after the decimal point");
      while (Peek() >= '0' && Peek() <= '9') ++pos_;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      integral = false;
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!(Peek() >= '0' && Peek() <= '9')) return Error("a digit in the exponent");
      while (Peek() >= '0' && Peek() <= '9') ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t value = 0;
      const auto r = std::from_chars(first, last, value);
      if (r.ec == std::errc() && r.ptr == last) {
        *out = JsonValue(value);
        return Status::Ok();
      }
      // Out of int64 range: fall through to double.
    }
    double value = 0.0;
    const auto r = std::from_chars(first, last, value);
    if (r.ec == std::errc::result_out_of_range) {
      pos_ = start;
      return Error("a number within double range");
    }
    if (r.ec != std::errc() || r.ptr != last) {
      pos_ = start;
      return Error("a number");
    }
    *out = JsonValue(value);
    return Status::Ok();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Status ParseJson(std::string_view text, JsonValue* out) {
  JsonParser parser(text);
  JsonValue value;
  MINIMAKV_RETURN_IF_ERROR(parser.ParseDocument(&value));
  *out = std::move(value);
  return Status::Ok();
}

}  // namespace minimakv
