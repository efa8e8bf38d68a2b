// SPDX-License-Identifier: Apache-2.0
#include "ids.hpp"

#include <charconv>
#include <cstdio>
#include <durable/errors.hpp>

#include "env.hpp"
#include "serialization.hpp"

namespace durable::detail {

std::string new_id() { return Env::system().new_id(); }

void check_step_id(std::string_view id) {
  if (id.empty()) throw Error(errc::invalid_argument, "a step id must not be empty");
  check_utf8(id, "step id");
  for (char c : id) {
    const char* why = nullptr;
    switch (c) {
      case '/':
        why = "nested step keys (outer/inner)";
        break;
      case '#':
        why = "repeated step keys (id#2)";
        break;
      case '[':
      case ']':
        why = "map item keys (id[0])";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char code[8];
          std::snprintf(code, sizeof code, "0x%02x",
                        static_cast<unsigned>(static_cast<unsigned char>(c)));
          throw Error(errc::invalid_argument,
                      "step id '" + std::string(id) + "' contains the control character " + code +
                          "; use letters, digits, '-', '_', '.' or ':' instead");
        }
    }
    if (why != nullptr) {
      throw Error(errc::invalid_argument,
                  "step id '" + std::string(id) + "' contains '" + std::string(1, c) +
                      "', which durable reserves for " + why +
                      "; use letters, digits, '-', '_', '.' or ':' instead");
    }
  }
}

namespace {
// The rule for a name that appears in a URL: `noun` says whose ("the key of a published value"),
// `route` where it appears.
void check_url_name(std::string_view name, std::string_view where, const std::string& noun,
                    std::string_view route) {
  const std::string what(where);
  if (name.empty()) throw Error(errc::invalid_argument, what + ": " + noun + " must not be empty");
  if (name.size() > kMaxPublishedKey) {
    throw Error(errc::too_large,
                what + ": " + noun + " '" + utf8_or_replaced(std::string(name.substr(0, 40))) +
                    "...' is " + std::to_string(name.size()) + " bytes long; the limit is " +
                    std::to_string(kMaxPublishedKey));
  }
  check_utf8(name, noun);
  for (char c : name) {
    if (c == '/') {
      throw Error(errc::invalid_argument,
                  what + ": " + noun + " '" + std::string(name) +
                      "' contains '/', which durable reserves (it appears in URLs: " +
                      std::string(route) + ")");
    }
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x",
                    static_cast<unsigned>(static_cast<unsigned char>(c)));
      throw Error(errc::invalid_argument,
                  what + ": " + noun + " contains the control character " + code);
    }
  }
}

std::string bracketed_base(std::string_view tool, std::string_view name) {
  std::string base = "[";
  base += tool;
  base.push_back(':');
  base += name;
  base.push_back(']');
  return base;
}
}  // namespace

void check_published_key(std::string_view key, std::string_view where) {
  check_url_name(key, where, "the key of a published value", "/v1/runs/{id}/published/{key}");
}

void check_stream_name(std::string_view name, std::string_view where) {
  check_url_name(name, where, "the name of a stream", "/v1/runs/{id}/streams/{name}");
}

std::string published_base(std::string_view key) { return bracketed_base("publish", key); }

std::string stream_base(std::string_view name) { return bracketed_base("stream", name); }

// "<created ms>.<row>", both in decimal: opaque to users, readable in a log.
std::string to_string(const RunCursor& cursor) {
  return std::to_string(cursor.created_ms) + "." + std::to_string(cursor.row);
}

std::optional<RunCursor> parse_run_cursor(std::string_view text) {
  const std::size_t dot = text.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  RunCursor cursor;
  const auto whole = [](std::string_view part, std::int64_t& into) {
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), into);
    return !part.empty() && error == std::errc() && end == part.data() + part.size();
  };
  if (!whole(text.substr(0, dot), cursor.created_ms) || !whole(text.substr(dot + 1), cursor.row) ||
      cursor.row < 0 || to_string(cursor) != text) {
    return std::nullopt;
  }
  return cursor;
}

RunCursor checked_run_cursor(std::string_view text) {
  if (const std::optional<RunCursor> cursor = parse_run_cursor(text)) return *cursor;
  throw Error(errc::invalid_argument,
              "'" + utf8_or_replaced(std::string(text)) +
                  "' is not a cursor of a run list: pass the cursor of a run a list returned");
}

}  // namespace durable::detail
