#include "tools/json.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace minimakv {
namespace {

TEST(JsonWriter, CompactAndPrettyOutputKeepInsertionOrder) {
  JsonValue row = JsonValue::Object();
  row.Set("path", "fp8");
  row.Set("context", int64_t(32768));
  row.Set("us_per_step", 123.5);
  row.Set("ok", true);
  row.Set("none", nullptr);
  JsonValue list = JsonValue::Array();
  list.Append(1);
  list.Append("a\"b\\c\n\x01");
  row.Set("list", std::move(list));
  EXPECT_EQ(row.Dump(),
            R"({"path":"fp8","context":32768,"us_per_step":123.5,"ok":true,"none":null,"list":[1,"a\"b\\c\n\u0001"]})");
  EXPECT_EQ(row.Find("context")->as_double(), 32768.0);
  row.Set("path", "tq3");  // replaces in place
  EXPECT_EQ(row.members().front().second.as_string(), "tq3");
  JsonValue small = JsonValue::Object();
  small.Set("a", JsonValue::Array());
  small.Set("b", 2);
  EXPECT_EQ(small.Dump(2), "{\n  \"a\": [],\n  \"b\": 2\n}");
}

TEST(JsonWriter, NumbersRoundTripAndNonFiniteBecomesNull) {
  EXPECT_EQ(JsonValue(0.1).Dump(), "0.1");
  EXPECT_EQ(JsonValue(64.0).Dump(), "64");
  EXPECT_EQ(JsonValue(int64_t(9007199254740993)).Dump(), "9007199254740993");  // 2^53 + 1 printed exactly
  EXPECT_EQ(JsonValue(std::nan("")).Dump(), "null");
  EXPECT_EQ(JsonValue(std::numeric_limits<double>::infinity()).Dump(), "null");
  const double tricky = 13.041015625 / 3.0;
  JsonValue back;
  ASSERT_TRUE(ParseJson(JsonValue(tricky).Dump(), &back).ok());
  EXPECT_EQ(back.as_double(), tricky);  // bit-exact round trip
}

TEST(JsonReader, ParsesEveryValueKind) {
  JsonValue v;
  const Status s = ParseJson(
      " {\"a\": [1, -2.5e2, 0, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\/\\t\", \"o\": {}, \"e\": []} ",
      &v);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(v.is_object());
  const JsonValue* a = v.Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->size(), 6u);
  int64_t one = 0;
  EXPECT_TRUE(a->items()[0].GetInt64(&one));
  EXPECT_EQ(one, 1);
  EXPECT_EQ(a->items()[1].as_double(), -250.0);
  int64_t not_int = 0;
  EXPECT_TRUE(a->items()[1].GetInt64(&not_int));  // -250.0 is integral
  EXPECT_TRUE(a->items()[3].as_bool());
  EXPECT_TRUE(a->items()[4].is_bool());
  EXPECT_TRUE(a->items()[5].is_null());
  EXPECT_EQ(v.Find("s")->as_string(), "x\xC3\xA9\xF0\x9F\x98\x80/\t");  // e-acute, U+1F600, slash, tab
  EXPECT_TRUE(v.Find("o")->is_object());
  EXPECT_EQ(v.Find("e")->size(), 0u);
  EXPECT_EQ(v.Find("missing"), nullptr);
  JsonValue half;
  ASSERT_TRUE(ParseJson("0.5", &half).ok());
  int64_t ignored = 0;
  EXPECT_FALSE(half.GetInt64(&ignored));
}

TEST(JsonReader, ErrorsGiveTheByteOffset) {
  struct Case {
    const char* text;
    const char* expected_substring;
  };
  const Case cases[] = {
      {"", "byte 0"},
      {"{\"a\": 1,}", "byte 8"},
      {"[1 2]", "byte 3"},
      {"{\"a\" 1}", "byte 5"},
      {"\"abc", "byte 4"},
      {"01", "byte 1"},  // leading zero: "0" then garbage
      {"1.", "byte 2"},
      {"tru", "byte 0"},
      {"\"\\x\"", "byte 2"},
      {"\"\\ud800\"", "low surrogate"},
      {"{}\n x", "line 2, column 2"},
      {"1e999", "double range"},
  };
  for (const Case& c : cases) {
    JsonValue v;
    const Status s = ParseJson(c.text, &v);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(c.expected_substring), std::string::npos) << c.text << " -> " << s.message();
  }
  std::string deep(kMaxJsonDepth + 2, '[');
  JsonValue v;
  EXPECT_NE(ParseJson(deep, &v).message().find("nesting depth"), std::string::npos);
}

}  // namespace
}  // namespace minimakv
