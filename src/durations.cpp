// SPDX-License-Identifier: Apache-2.0
#include "durations.hpp"

#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <durable/errors.hpp>
#include <string>
#include <utility>

namespace durable::detail {

namespace {

constexpr double kLongest = 1e15;  // ms, about 31,700 years
constexpr std::int64_t kSecond = 1000, kMinute = 60 * kSecond, kHour = 60 * kMinute,
                       kDay = 24 * kHour;

// Every accepted spelling of a unit and its length in milliseconds.
constexpr std::array<std::pair<std::string_view, std::int64_t>, 24> kUnits = {{
    {"ms", 1},        {"msec", 1},       {"millisecond", 1},  {"milliseconds", 1},  {"s", kSecond},
    {"sec", kSecond}, {"secs", kSecond}, {"second", kSecond}, {"seconds", kSecond}, {"m", kMinute},
    {"min", kMinute}, {"mins", kMinute}, {"minute", kMinute}, {"minutes", kMinute}, {"h", kHour},
    {"hr", kHour},    {"hrs", kHour},    {"hour", kHour},     {"hours", kHour},     {"d", kDay},
    {"day", kDay},    {"days", kDay},    {"w", 7 * kDay},     {"weeks", 7 * kDay},
}};

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw Error(errc::invalid_argument,
              "'" + std::string(text) + "' is not a duration (" + why +
                  "); write it like \"30s\", \"90 seconds\", \"1 hour\", \"1 day\" or \"1h30m\"");
}

}  // namespace

std::chrono::milliseconds parse_duration(std::string_view text) {
  std::size_t i = 0;
  const auto skip_spaces = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  double total = 0;
  int parts = 0;
  skip_spaces();
  while (i < text.size()) {
    const std::size_t number_start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
      ++i;
    if (i == number_start) bad(text, "expected a number at position " + std::to_string(i + 1));
    const std::string number(text.substr(number_start, i - number_start));
    if (number.find('.') != number.rfind('.') ||
        number.find_first_of("0123456789") == std::string::npos)
      bad(text, "'" + number + "' is not a number");
    skip_spaces();
    const std::size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string unit(text.substr(unit_start, i - unit_start));
    for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (unit.empty()) bad(text, "'" + number + "' has no unit");
    if (unit == "week") unit = "w";
    std::int64_t unit_ms = 0;
    for (const auto& [name, ms] : kUnits) {
      if (name == unit) unit_ms = ms;
    }
    if (unit_ms == 0) bad(text, "unknown unit '" + unit + "'");
    // Not std::stod, which throws out_of_range for a number past a double (310 digits) or too
    // small for one: strtod gives infinity, refused below, or about 0.
    total += std::strtod(number.c_str(), nullptr) * static_cast<double>(unit_ms);
    ++parts;
    skip_spaces();
  }
  if (parts == 0) bad(text, "it is empty");
  if (total > kLongest) bad(text, "it is longer than 30,000 years");
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(total)));
}

std::chrono::milliseconds whole_milliseconds(std::chrono::duration<double, std::milli> d) {
  const double ms = d.count();
  if (std::isnan(ms) || ms > kLongest) {
    throw Error(errc::invalid_argument,
                "a sleep of " + std::to_string(ms) +
                    " ms is not a usable duration: it must be a number of at most 30,000 years");
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(std::max(ms, -1.0))));
}

namespace {

// Years 1000 to 9999, in days since 1970-01-01: the ones strftime writes with four digits.
constexpr std::int64_t kFirstDay = -354'285, kLastDay = 2'932'896;

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - (a % b < 0 ? 1 : 0); }

// Any other year, as strftime writes it.
std::string utc_text_by_libc(std::int64_t ms, bool with_ms) {
  const std::time_t seconds = static_cast<std::time_t>(floor_div(ms, kSecond));
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  if (with_ms) {
    std::snprintf(text + n, sizeof text - n, ".%03dZ",
                  static_cast<int>(ms - floor_div(ms, kSecond) * kSecond));
  } else {
    std::snprintf(text + n, sizeof text - n, "Z");
  }
  return text;
}

}  // namespace

// The calendar date from days since 1970-01-01 (proleptic Gregorian), and the fields written as
// digits: the API's run page formats six times per answer, and gmtime_r, strftime and snprintf
// took about 3,500 instructions for each (callgrind).
std::string utc_text(std::int64_t ms, bool with_ms) {
  const std::int64_t day = floor_div(ms, kDay);
  if (day < kFirstDay || day > kLastDay) return utc_text_by_libc(ms, with_ms);
  const std::int64_t in_day = ms - day * kDay;
  const std::chrono::year_month_day date{std::chrono::sys_days{std::chrono::days{day}}};
  std::string text;
  text.reserve(24);
  const auto put = [&text](std::int64_t value, int digits) {
    char field[20];
    for (int i = digits - 1; i >= 0; --i, value /= 10)
      field[i] = static_cast<char>('0' + value % 10);
    text.append(field, static_cast<std::size_t>(digits));
  };
  put(static_cast<int>(date.year()), 4);
  text += '-';
  put(static_cast<unsigned>(date.month()), 2);
  text += '-';
  put(static_cast<unsigned>(date.day()), 2);
  text += 'T';
  put(in_day / kHour, 2);
  text += ':';
  put(in_day % kHour / kMinute, 2);
  text += ':';
  put(in_day % kMinute / kSecond, 2);
  if (with_ms) {
    text += '.';
    put(in_day % kSecond, 3);
  }
  text += 'Z';
  return text;
}

}  // namespace durable::detail

namespace durable::detail {

std::optional<std::int64_t> parse_utc_text(std::string_view text) {
  // "YYYY-MM-DDTHH:MM:SS" then ".mmm" (1 to 3 digits) or nothing, then "Z".
  const auto digits = [&text](std::size_t at, std::size_t n) -> std::optional<int> {
    if (at + n > text.size()) return std::nullopt;
    int value = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return std::nullopt;
      value = value * 10 + (text[i] - '0');
    }
    return value;
  };
  const auto is = [&text](std::size_t at, char c) { return at < text.size() && text[at] == c; };
  const auto year = digits(0, 4), month = digits(5, 2), day = digits(8, 2);
  const auto hour = digits(11, 2), minute = digits(14, 2), second = digits(17, 2);
  if (!year || !month || !day || !hour || !minute || !second || !is(4, '-') || !is(7, '-') ||
      !(is(10, 'T') || is(10, 't')) || !is(13, ':') || !is(16, ':')) {
    return std::nullopt;
  }
  std::size_t at = 19;
  int millis = 0;
  if (is(at, '.')) {
    std::size_t n = 0;
    while (at + 1 + n < text.size() && n < 3 && text[at + 1 + n] >= '0' && text[at + 1 + n] <= '9')
      ++n;
    if (n == 0) return std::nullopt;
    millis = *digits(at + 1, n);
    for (std::size_t i = n; i < 3; ++i) millis *= 10;
    at += 1 + n;
  }
  if (!(is(at, 'Z') || is(at, 'z')) || at + 1 != text.size()) return std::nullopt;
  const std::chrono::year_month_day date{std::chrono::year(*year),
                                         std::chrono::month(static_cast<unsigned>(*month)),
                                         std::chrono::day(static_cast<unsigned>(*day))};
  if (!date.ok() || *hour > 23 || *minute > 59 || *second > 59) return std::nullopt;
  const std::int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  return days * kDay + *hour * kHour + *minute * kMinute + *second * kSecond + millis;
}

}  // namespace durable::detail

namespace durable::detail {

std::optional<std::chrono::system_clock::time_point> parse_utc_time(std::string_view text) {
  const std::optional<std::int64_t> ms = parse_utc_text(text);
  using Clock = std::chrono::system_clock;
  if (!ms || *ms >= to_ms(Clock::time_point::max()) || *ms <= to_ms(Clock::time_point::min())) {
    return std::nullopt;
  }
  return Clock::time_point(std::chrono::milliseconds(*ms));
}

}  // namespace durable::detail
