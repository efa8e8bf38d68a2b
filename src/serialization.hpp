#pragma once
// JSON text of journaled values, with the cases JSON cannot hold made explicit.

#include <durable/options.hpp>
#include <optional>
#include <string>

namespace durable::detail {

/// Writes value's JSON text to `text`. Returns why it cannot be stored faithfully, if it cannot:
/// a string that is not valid UTF-8, or a NaN or infinite number (JSON has none; written, it
/// would read back as null).
std::optional<std::string> encode(const json& value, std::string& text);

/// JSON text that never throws: invalid UTF-8 is replaced. For diagnostics (error messages may
/// carry any bytes), not for step results.
std::string lenient_dump(const json& value);

}  // namespace durable::detail
