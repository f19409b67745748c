// A small JSON value with a writer and a reader: enough for the CLI's --json rows and for reading a Hugging Face
// config.json. No external dependency (the GPU machine has no Debian -dev packages), RFC 8259 grammar.
//
// Objects keep their keys in insertion order (so printed rows read in the order they were built); a repeated key
// in parsed input keeps the last value, as most readers do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "minimakv/status.h"

namespace minimakv {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;  // null
  JsonValue(std::nullptr_t) {}
  JsonValue(bool value) : type_(Type::kBool), bool_(value) {}
  JsonValue(double value) : type_(Type::kNumber), number_(value) {}
  JsonValue(int value) : JsonValue(double(value)) {}
  JsonValue(int64_t value) : type_(Type::kNumber), number_(double(value)), integer_(value), is_integer_(true) {}
  JsonValue(uint64_t value) : JsonValue(int64_t(value)) {}
  JsonValue(std::string value) : type_(Type::kString), string_(std::move(value)) {}
  JsonValue(std::string_view value) : JsonValue(std::string(value)) {}
  JsonValue(const char* value) : JsonValue(std::string(value)) {}

  static JsonValue Array() { JsonValue v; v.type_ = Type::kArray; return v; }
  static JsonValue Object() { JsonValue v; v.type_ = Type::kObject; return v; }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Accessors. REQUIRES: the matching type (they return a zero value otherwise, never abort).
  bool as_bool() const { return type_ == Type::kBool && bool_; }
  double as_double() const { return type_ == Type::kNumber ? number_ : 0.0; }
  const std::string& as_string() const { return string_; }
  // The number as an int64 when it is integral and in range (exactly as written, for integers parsed from text).
  bool GetInt64(int64_t* out) const;

  // Arrays.
  const std::vector<JsonValue>& items() const { return items_; }
  JsonValue& Append(JsonValue value);  // REQUIRES: is_array()
  size_t size() const { return is_array() ? items_.size() : members_.size(); }

  // Objects.
  const std::vector<Member>& members() const { return members_; }
  JsonValue& Set(std::string key, JsonValue value);  // REQUIRES: is_object(); replaces an existing key
  const JsonValue* Find(std::string_view key) const;  // nullptr when absent or not an object

  // Text. indent_spaces 0: one line (no spaces); > 0: pretty-printed. Non-finite numbers print as null (JSON
  // has no NaN/Inf); finite doubles print in the shortest form that reads back to the same double.
  std::string Dump(int indent_spaces = 0) const;

 private:
  void DumpTo(std::string* out, int indent_spaces, int depth) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0.0;
  int64_t integer_ = 0;
  bool is_integer_ = false;  // number came from an int64 (printed exactly, even beyond 2^53)
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<Member> members_;
};

// Parses one JSON text (leading/trailing whitespace allowed, nothing else after the value). On bad input returns
// InvalidArgument "JSON parse error at byte N (line L, column C): what was expected". Nesting deeper than
// kMaxJsonDepth is an error rather than a stack overflow.
inline constexpr int kMaxJsonDepth = 256;
Status ParseJson(std::string_view text, JsonValue* out);

// Appends `text` as a quoted JSON string with the required escapes (control characters as \u00XX).
void AppendJsonString(std::string_view text, std::string* out);

}  // namespace minimakv
