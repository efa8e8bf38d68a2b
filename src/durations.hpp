#pragma once
// Durations written as text, for step.sleep("id", "1h30m").

#include <chrono>
#include <string_view>

namespace durable::detail {

/// Parses "30s", "90 seconds", "1 hour", "2 hours", "1 day", "1h30m", "500ms", "1.5h": one or
/// more (number, unit) pairs, spaces allowed. Units: ms, s, m, h, d, w and their English words
/// (singular or plural, "sec", "min", "hr" too). Throws Error naming the text otherwise.
std::chrono::milliseconds parse_duration(std::string_view text);

/// d rounded up to whole milliseconds. Throws Error when it is NaN or longer than 30,000 years
/// (which a sleep has no use for, and which would overflow a time point).
std::chrono::milliseconds whole_milliseconds(std::chrono::duration<double, std::milli> d);

}  // namespace durable::detail
