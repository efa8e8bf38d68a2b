// SPDX-License-Identifier: Apache-2.0
#include "serialization.hpp"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "errors_internal.hpp"

namespace durable::detail {

namespace {

std::string too_deep(int limit) {
  return "it is nested more than " + std::to_string(limit) +
         " levels deep (arrays and objects within each other); the limit keeps a hostile value "
         "from exhausting a stack";
}

enum class Flaw { none, too_deep, non_finite };

bool is_non_finite(const json& value) {
  return value.is_number_float() && !std::isfinite(value.get<double>());
}

// One walk over a value, with a stack of its own rather than recursion: a value nested deeper
// than the limit must be refused before anything recursive (dump, a copy) touches it, and this
// may run on a fiber's small stack.
Flaw flaw_of(const json& value) {
  if (!value.is_structured()) return is_non_finite(value) ? Flaw::non_finite : Flaw::none;
  std::vector<std::pair<const json*, int>> to_visit{{&value, 1}};
  while (!to_visit.empty()) {
    const auto [item, depth] = to_visit.back();
    to_visit.pop_back();
    if (depth > kMaxJsonDepth) return Flaw::too_deep;
    for (const json& child : *item) {
      if (child.is_structured()) {
        to_visit.emplace_back(&child, depth + 1);
      } else if (is_non_finite(child)) {
        return Flaw::non_finite;
      }
    }
  }
  return Flaw::none;
}

}  // namespace

std::optional<std::string> too_deep_text(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is, does not end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return too_deep(limit);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

std::optional<std::string> encode(const json& value, std::string& text) {
  switch (flaw_of(value)) {
    case Flaw::too_deep:
      return too_deep(kMaxJsonDepth);
    case Flaw::non_finite:
      return "it holds a NaN or infinite number, which JSON cannot represent";
    case Flaw::none:
      break;
  }
  try {
    text = value.dump();
  } catch (const json::type_error& e) {
    return std::string("it holds a string that is not valid UTF-8 (") + e.what() + ")";
  }
  return std::nullopt;
}

std::string lenient_dump(const json& value) {
  if (flaw_of(value) == Flaw::too_deep)
    return "<a value nested more than " + std::to_string(kMaxJsonDepth) + " levels deep>";
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0) return false;  // U+0000: PostgreSQL's text cannot hold it
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The second byte's range narrows for the lead bytes that could otherwise spell an overlong
    // form (E0, F0), a surrogate (ED) or a code point past U+10FFFF (F4).
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      length = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      length = 3;
      if (c == 0xe0) low = 0xa0;
      if (c == 0xed) high = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      length = 4;
      if (c == 0xf0) low = 0x90;
      if (c == 0xf4) high = 0x8f;
    } else {
      return false;
    }
    if (text.size() - i < length) return false;
    const auto second = static_cast<unsigned char>(text[i + 1]);
    if (second < low || second > high) return false;
    for (std::size_t k = 2; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if (next < 0x80 || next > 0xbf) return false;
    }
    i += length;
  }
  return true;
}

void check_utf8(std::string_view text, std::string_view what) {
  if (!is_utf8(text)) {
    throw Error(errc::invalid_argument,
                std::string(what) + " is not valid UTF-8 or holds a NUL byte: '" +
                    utf8_or_replaced(text) +
                    "' (shown with U+FFFD for each such byte); convert it to UTF-8 (from Latin-1, "
                    "say) before passing it to durable");
  }
}

std::string utf8_or_replaced(std::string_view text) {
  if (is_utf8(text)) return std::string(text);
  const std::string quoted =
      json(std::string(text)).dump(-1, ' ', false, json::error_handler_t::replace);
  std::string replaced = json::parse(quoted).get<std::string>();
  std::string out;
  out.reserve(replaced.size());
  for (const char c : replaced) {
    if (c == '\0') {
      out += "\xef\xbf\xbd";  // U+FFFD
    } else {
      out += c;
    }
  }
  return out;
}

json error_to_json(const ErrorInfo& e) {
  return {
      {"type", e.type}, {"message", e.message}, {"step_id", e.step_id}, {"attempts", e.attempts}};
}

namespace {

// A field of a stored error object, which another tool may have written with any type in it
// (json::value() would throw type_error): text as it is, anything else as its JSON text.
std::string error_text(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return {};
  return it->is_string() ? it->get<std::string>() : lenient_dump(*it);
}

// A count that is not a whole number in int's range reads as 0 (a double past it would not
// convert).
int error_attempts(const json& j) {
  const auto it = j.find("attempts");
  if (it == j.end() || !it->is_number_integer()) return 0;
  if (*it < json(0) || *it > json(std::numeric_limits<int>::max())) return 0;
  return it->get<int>();
}

}  // namespace

ErrorInfo error_from_json(const json& j) {
  // Not an object, or fields that are not what error_to_json writes: text another tool wrote,
  // or the note stored() reads in place of a value nested too deep. Read as it is rather than
  // thrown: a claim must not fail on it.
  if (!j.is_object())
    return {"durable::Error", j.is_string() ? j.get<std::string>() : lenient_dump(j), "", 0};
  return {error_text(j, "type"), error_text(j, "message"), error_text(j, "step_id"),
          error_attempts(j)};
}

std::string shortened_dump(const json& value, std::size_t limit) {
  std::string text = lenient_dump(value);
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

std::string storable_text(const json& value, const std::string& what, std::size_t limit) {
  std::string text;
  if (const auto problem = encode(value, text))
    throw Error(errc::invalid_argument, what + " cannot be stored: " + *problem);
  if (text.size() > limit) {
    throw Error(errc::too_large, what + " is " + human_bytes(text.size()) + "; the limit is " +
                                     human_bytes(limit) + " (RuntimeOptions::max_output_bytes)");
  }
  return text;
}

}  // namespace durable::detail
