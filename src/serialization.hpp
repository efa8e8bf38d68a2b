// SPDX-License-Identifier: Apache-2.0
#pragma once
// JSON text of journaled values, with the cases JSON cannot hold made explicit.

#include <cstddef>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail {

/// How deeply arrays and objects may nest in any JSON durable takes in: a run's input, an
/// event's data, a step's or a run's result, an HTTP request body. nlohmann copies, compares and
/// writes JSON recursively, so without a bound a hostile value exhausts a stack (a fiber's is
/// small) and kills the process.
inline constexpr int kMaxJsonDepth = 64;

/// How deeply JSON read back from the store may nest: the values durable took in, within the
/// few levels of its own wrappers (an event as a triggered run's input, an invoke step's call).
/// Deeper text was written by something else and is not parsed.
inline constexpr int kMaxStoredDepth = kMaxJsonDepth + 8;

/// Why JSON text nests arrays and objects deeper than `limit`, or nullopt. A scan of the text,
/// not a parse: meant for text that is not parsed yet (a request body, a stored value).
std::optional<std::string> too_deep_text(std::string_view text, int limit);

/// Writes value's JSON text to `text`. Returns why it cannot be stored faithfully, if it cannot:
/// nesting deeper than kMaxJsonDepth, a string that is not valid UTF-8, or a NaN or infinite
/// number (JSON has none; written, it would read back as null). Never recurses deeper than the
/// limit, whatever the value.
std::optional<std::string> encode(const json& value, std::string& text);

/// The JSON text of a value handed to the store (a run's input, an event's data). Throws Error
/// "<what> cannot be stored: ..." when encode() refuses it, and "<what> is N; the limit is M
/// (RuntimeOptions::max_output_bytes)" when the text is longer than `limit`.
std::string storable_text(const json& value, const std::string& what, std::size_t limit);

/// JSON text that never throws: invalid UTF-8 is replaced, a value nested too deep is named, not
/// written. For diagnostics (error messages may
/// carry any bytes), not for step results.
std::string lenient_dump(const json& value);

/// Whether `text` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF)
/// without a NUL: text every store holds as it is. SQLite keeps any bytes; PostgreSQL refuses
/// the rest.
bool is_utf8(std::string_view text);

/// The value of a hex digit of either case, or -1 for any other character.
constexpr int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
/// Throws Error saying "`what` is not valid UTF-8 ..." unless is_utf8(): names and keys that find
/// things again (a workflow, a step id, an event, a correlation id, an idempotency key), which
/// must not be changed to fit.
void check_utf8(std::string_view text, std::string_view what);
/// `text` as it is when is_utf8(), else with each invalid byte (and NUL) replaced by U+FFFD: free
/// text (a reason in a run's history), kept readable on every store.
std::string utf8_or_replaced(std::string_view text);

/// An ErrorInfo as JSON {"type", "message", "step_id", "attempts"}, as the store keeps it and
/// the admin API shows it; and back.
json error_to_json(const ErrorInfo& error);
ErrorInfo error_from_json(const json& j);

/// lenient_dump cut to `limit` characters, "..." marking a cut: a value in a message.
std::string shortened_dump(const json& value, std::size_t limit = 200);

}  // namespace durable::detail
