#include "tools/cli_args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

namespace minimakv {

namespace {

constexpr int64_t kKiloTokens = 1024;  // "32k" context = 32 * 1024 tokens, the usual convention

std::string JoinInts(const auto& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(values[i]);
  }
  return out;
}

std::string FormatDouble(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// Levenshtein distance, for "did you mean" hints on mistyped flags.
// 'text' in single quotes. Built by appending: GCC 12 -O3 gives a false -Wrestrict on "'" + std::string
// (GCC bug 105329).
std::string Quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out.append(text);
  out += '\'';
  return out;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

Status ParseInt64Value(std::string_view text, int64_t* out) {
  std::string_view digits = text;
  int64_t multiplier = 1;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
    multiplier = kKiloTokens;
    digits.remove_suffix(1);
  }
  int64_t value = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (!digits.empty() && r.ec == std::errc::result_out_of_range && r.ptr == digits.data() + digits.size()) {
    return Status::InvalidArgument(Quoted(text) + " is out of range");
  }
  if (digits.empty() || r.ec != std::errc() || r.ptr != digits.data() + digits.size()) {
    return Status::InvalidArgument(Quoted(text) + " is not an integer");
  }
  if (value > std::numeric_limits<int64_t>::max() / multiplier ||
      value < std::numeric_limits<int64_t>::min() / multiplier) {
    return Status::InvalidArgument(Quoted(text) + " is out of range");
  }
  *out = value * multiplier;
  return Status::Ok();
}

Status ParseDoubleValue(std::string_view text, double* out) {
  double value = 0.0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size() || !std::isfinite(value)) {
    return Status::InvalidArgument(Quoted(text) + " is not a finite number");
  }
  *out = value;
  return Status::Ok();
}

Status ParseInt64ListValue(std::string_view text, std::vector<int64_t>* out) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    int64_t value = 0;
    Status s = ParseInt64Value(item, &value);
    if (!s.ok()) {
      return Status::InvalidArgument(Quoted(text) + " is not a comma-separated list of integers (" + s.message() + ")");
    }
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  *out = std::move(values);
  return Status::Ok();
}

ArgParser::Flag ArgParser::MakeFlag(std::string name, std::string value_name, std::string help,
                                   std::string default_text) {
  Flag f;
  f.name = std::move(name);
  f.value_name = std::move(value_name);
  f.help = std::move(help);
  f.default_text = std::move(default_text);
  return f;
}

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void ArgParser::AddString(std::string name, std::string value_name, std::string help, std::string* target) {
  Flag f = MakeFlag(std::move(name), std::move(value_name), std::move(help), *target);
  f.set = [target](Flag&, std::string_view v) {
    *target = std::string(v);
    return Status::Ok();
  };
  flags_.push_back(std::move(f));
}

void ArgParser::AddInt(std::string name, std::string help, int64_t* target) {
  Flag f = MakeFlag(std::move(name), "N", std::move(help), std::to_string(*target));
  f.set = [target](Flag&, std::string_view v) { return ParseInt64Value(v, target); };
  flags_.push_back(std::move(f));
}

void ArgParser::AddInt(std::string name, std::string help, int* target) {
  Flag f = MakeFlag(std::move(name), "N", std::move(help), std::to_string(*target));
  f.set = [target](Flag&, std::string_view v) {
    int64_t value = 0;
    MINIMAKV_RETURN_IF_ERROR(ParseInt64Value(v, &value));
    if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
      return Status::InvalidArgument(Quoted(v) + " is out of range for a 32-bit integer");
    }
    *target = int(value);
    return Status::Ok();
  };
  flags_.push_back(std::move(f));
}

void ArgParser::AddDouble(std::string name, std::string help, double* target) {
  Flag f = MakeFlag(std::move(name), "X", std::move(help), FormatDouble(*target));
  f.set = [target](Flag&, std::string_view v) { return ParseDoubleValue(v, target); };
  flags_.push_back(std::move(f));
}

void ArgParser::AddBool(std::string name, std::string help, bool* target) {
  // Only a flag that defaults to on shows a default (an off-by-default switch is the usual case).
  Flag f = MakeFlag(std::move(name), "", std::move(help), *target ? "true" : "");
  f.is_bool = true;
  f.set = [target](Flag&, std::string_view v) {
    if (v == "true" || v == "1") {
      *target = true;
    } else if (v == "false" || v == "0") {
      *target = false;
    } else {
      return Status::InvalidArgument(Quoted(v) + " is not true or false");
    }
    return Status::Ok();
  };
  flags_.push_back(std::move(f));
}

void ArgParser::AddIntList(std::string name, std::string help, std::vector<int64_t>* target) {
  Flag f = MakeFlag(std::move(name), "N[,N...]", std::move(help), JoinInts(*target));
  f.set = [target](Flag& self, std::string_view v) {
    std::vector<int64_t> values;
    MINIMAKV_RETURN_IF_ERROR(ParseInt64ListValue(v, &values));
    if (!self.list_replaced) target->clear();
    self.list_replaced = true;
    target->insert(target->end(), values.begin(), values.end());
    return Status::Ok();
  };
  flags_.push_back(std::move(f));
}

void ArgParser::AddIntList(std::string name, std::string help, std::vector<int>* target) {
  Flag f = MakeFlag(std::move(name), "N[,N...]", std::move(help), JoinInts(*target));
  f.set = [target](Flag& self, std::string_view v) {
    std::vector<int64_t> values;
    MINIMAKV_RETURN_IF_ERROR(ParseInt64ListValue(v, &values));
    for (int64_t value : values) {
      if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
        return Status::InvalidArgument(Quoted(std::to_string(value)) + " is out of range for a 32-bit integer");
      }
    }
    if (!self.list_replaced) target->clear();
    self.list_replaced = true;
    for (int64_t value : values) target->push_back(int(value));
    return Status::Ok();
  };
  flags_.push_back(std::move(f));
}

void ArgParser::AddChoice(std::string name, std::vector<std::string> choices, std::string help, std::string* target) {
  std::string value_name;
  for (size_t i = 0; i < choices.size(); ++i) value_name += (i > 0 ? "|" : "") + choices[i];
  Flag f = MakeFlag(std::move(name), value_name, std::move(help), *target);
  f.set = [target, choices = std::move(choices), value_name](Flag&, std::string_view v) {
    if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
      return Status::InvalidArgument(Quoted(v) + " is not one of " + value_name);
    }
    *target = std::string(v);
    return Status::Ok();
  };
  flags_.push_back(std::move(f));
}

ArgParser::Flag* ArgParser::FindFlag(std::string_view name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool ArgParser::WasSet(std::string_view name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.seen;
  }
  return false;
}

std::string ArgParser::SuggestFlag(std::string_view name) const {
  // Close enough to be a typo: at most 2 edits, or one name is a prefix of the other.
  constexpr size_t kMaxTypoEdits = 2;
  std::string best;
  size_t best_distance = kMaxTypoEdits + 1;
  for (const Flag& f : flags_) {
    size_t d = EditDistance(name, f.name);
    if (f.name.starts_with(name) || name.starts_with(f.name)) d = std::min(d, kMaxTypoEdits);
    if (d < best_distance) {
      best_distance = d;
      best = f.name;
    }
  }
  return best;
}

Status ArgParser::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help" || arg == "help") {
      help_requested_ = true;
      continue;
    }
    if (!arg.starts_with("--") || arg.size() == 2) {
      return Status::InvalidArgument("unexpected argument '" + arg + "' (flags start with --; see " +
                                     command_ + " --help)");
    }
    std::string_view body = std::string_view(arg).substr(2);
    std::string_view name = body;
    std::string_view value;
    bool has_inline_value = false;
    if (const size_t eq = body.find('='); eq != std::string_view::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_inline_value = true;
    }
    Flag* flag = FindFlag(name);
    if (flag == nullptr) {
      std::string message = "unknown flag --" + std::string(name);
      const std::string suggestion = SuggestFlag(name);
      if (!suggestion.empty()) message += " (did you mean --" + suggestion + "?)";
      return Status::InvalidArgument(message + "; see " + command_ + " --help");
    }
    if (!has_inline_value) {
      if (flag->is_bool) {
        value = "true";
      } else {
        if (i + 1 >= args.size()) {
          return Status::InvalidArgument("flag --" + flag->name + " needs a value (" + flag->value_name +
                                         ")");
        }
        value = args[++i];
      }
    }
    Status s = flag->set(*flag, value);
    if (!s.ok()) return Status::InvalidArgument("bad value for --" + flag->name + ": " + s.message());
    flag->seen = true;
  }
  return Status::Ok();
}

std::string ArgParser::Help() const {
  std::string out = "Usage: " + command_ + " [flags]\n\n" + summary_ + "\n\nFlags:\n";
  std::vector<std::string> left;
  size_t width = std::string("  -h, --help").size();
  for (const Flag& f : flags_) {
    left.push_back("  --" + f.name + (f.is_bool ? "" : " " + f.value_name));
    width = std::max(width, left.back().size());
  }
  constexpr size_t kColumnGap = 2;
  for (size_t i = 0; i < flags_.size(); ++i) {
    out += left[i] + std::string(width + kColumnGap - left[i].size(), ' ') + flags_[i].help;
    if (!flags_[i].default_text.empty()) out += " (default: " + flags_[i].default_text + ")";
    out += "\n";
  }
  out += "  -h, --help" + std::string(width + kColumnGap - std::string("  -h, --help").size(), ' ') +
         "show this help and exit\n";
  if (!epilog_.empty()) out += "\n" + epilog_ + (epilog_.ends_with('\n') ? "" : "\n");
  return out;
}

}  // namespace minimakv
