// SPDX-License-Identifier: Apache-2.0
#pragma once
// Durations written as text, for step.sleep("id", "1h30m").

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail {

/// Parses "30s", "90 seconds", "1 hour", "2 hours", "1 day", "1h30m", "500ms", "1.5h": one or
/// more (number, unit) pairs, spaces allowed. Units: ms, s, m, h, d, w and their English words
/// (singular or plural, "sec", "min", "hr" too). Throws Error naming the text otherwise.
std::chrono::milliseconds parse_duration(std::string_view text);

/// d rounded up to whole milliseconds. Throws Error when it is NaN or longer than 30,000 years
/// (which a sleep has no use for, and which would overflow a time point).
std::chrono::milliseconds whole_milliseconds(std::chrono::duration<double, std::milli> d);

/// A time point as milliseconds since the Unix epoch, the unit of every time the store keeps.
inline std::int64_t to_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

/// A time in ms since the epoch as UTC text: "2026-11-21T05:00:00.123Z", or without the
/// milliseconds "2026-11-21T05:00:00Z".
std::string utc_text(std::int64_t ms, bool with_ms = true);

/// The inverse of utc_text: "2026-11-21T05:00:00Z" or with 1 to 3 digits of a second
/// ("...:00.123Z") as ms since the epoch; nullopt for any other text or a date that does not
/// exist.
std::optional<std::int64_t> parse_utc_text(std::string_view text);
/// parse_utc_text as a time point; nullopt also for a time past the system clock's last one (it
/// counts nanoseconds: the year 2262).
std::optional<std::chrono::system_clock::time_point> parse_utc_time(std::string_view text);

}  // namespace durable::detail
