// SPDX-License-Identifier: Apache-2.0
#include "cron.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <span>
#include <utility>
#include <vector>

namespace durable::detail {

namespace {

namespace chrono = std::chrono;

constexpr std::array<std::string_view, 12> kMonthNames = {"jan", "feb", "mar", "apr", "may", "jun",
                                                          "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::array<std::string_view, 7> kDayNames = {"sun", "mon", "tue", "wed",
                                                       "thu", "fri", "sat"};

// One of the five fields. A name stands for `min` plus its index in `names`.
struct Field {
  std::string_view name;
  int min;
  int max;
  std::span<const std::string_view> names;
  std::string_view names_hint;
};
constexpr std::array<Field, 5> kFields = {{
    {"minute", 0, 59, {}, {}},
    {"hour", 0, 23, {}, {}},
    {"day-of-month", 1, 31, {}, {}},
    {"month", 1, 12, kMonthNames, "a month name (jan..dec)"},
    {"day-of-week", 0, 7, kDayNames, "a day name (sun..sat)"},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kMacros = {{
    {"@hourly", "0 * * * *"},
    {"@daily", "0 0 * * *"},
    {"@midnight", "0 0 * * *"},
    {"@weekly", "0 0 * * 0"},
    {"@monthly", "0 0 1 * *"},
    {"@yearly", "0 0 1 1 *"},
    {"@annually", "0 0 1 1 *"},
}};

constexpr std::string_view kHowTo =
    "write 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily";

// How far next_after looks ahead: about 5 years, leap days included.
constexpr chrono::days kSearchSpan{5 * 366};
// next_after answers for times in the years 1 to 9999 only, which keeps every date it computes
// (up to 5 years later) inside the range of chrono::year and the result inside int64 ms.
constexpr std::int64_t kEarliestMs =
    chrono::sys_time<chrono::milliseconds>(chrono::sys_days(chrono::year(1) / 1 / 1))
        .time_since_epoch()
        .count();
constexpr std::int64_t kEndMs =
    chrono::sys_time<chrono::milliseconds>(chrono::sys_days(chrono::year(10000) / 1 / 1))
        .time_since_epoch()
        .count();

[[noreturn]] void bad(std::string_view expression, const std::string& why) {
  throw Error(errc::invalid_argument,
              "'" + std::string(expression) + "' is not a cron expression: " + why);
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> split_fields(std::string_view text) {
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const std::size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) fields.push_back(text.substr(start, i - start));
  }
  return fields;
}

std::vector<std::string_view> expand_macro(std::string_view expression,
                                           const std::vector<std::string_view>& fields) {
  if (fields.size() != 1)
    bad(expression,
        "a macro such as " + std::string(fields[0]) + " stands alone, with no fields after it");
  const std::string macro = lower(fields[0]);
  for (const auto& [name, meaning] : kMacros) {
    if (name == macro) return split_fields(meaning);
  }
  bad(expression, std::string(fields[0]) +
                      " is not a macro; use @hourly, @daily, @midnight, @weekly, @monthly, "
                      "@yearly or @annually");
}

// Parses one field's text into a mask with bit v set for each value v it matches.
class FieldParser {
 public:
  FieldParser(std::string_view expression, const Field& field, std::string_view text)
      : expression_(expression), field_(field), text_(text) {}

  std::uint64_t parse() const {
    std::uint64_t mask = 0;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = text_.find(',', start);
      mask |= parse_item(text_.substr(start, comma - start));
      if (comma == std::string_view::npos) return mask;
      start = comma + 1;
    }
  }

 private:
  [[noreturn]] void bad_field(const std::string& why) const {
    bad(expression_,
        "the " + std::string(field_.name) + " field '" + std::string(text_) + "' " + why);
  }

  std::uint64_t parse_item(std::string_view item) const {
    if (item.empty()) bad_field("has an empty item in its list");
    std::string_view range = item;
    int step = 1;
    bool stepped = false;
    if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
      range = item.substr(0, slash);
      step = parse_step(item.substr(slash + 1));
      stepped = true;
    }
    int first = field_.min, last = field_.max;
    if (const std::size_t dash = range.find('-'); dash != std::string_view::npos) {
      first = parse_value(range.substr(0, dash), item);
      last = parse_value(range.substr(dash + 1), item);
      if (first > last) {
        bad_field("has the range " + std::string(range) +
                  ", which runs backwards; write a range that wraps as two, like " +
                  std::to_string(first) + "-" + std::to_string(field_.max) + "," +
                  std::to_string(field_.min) + "-" + std::to_string(last));
      }
    } else if (range != "*") {
      first = parse_value(range, item);
      last = stepped ? field_.max : first;  // "a/n" runs from a to the largest value
    }
    std::uint64_t mask = 0;
    for (int value = first; value <= last; value += step) mask |= std::uint64_t{1} << value;
    return mask;
  }

  int parse_step(std::string_view text) const {
    const int span = field_.max - field_.min + 1;
    int step = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), step);
    if (text.empty() || end != text.data() + text.size() || error == std::errc::invalid_argument)
      bad_field("has the step '" + std::string(text) + "', which is not a number");
    if (error != std::errc{} || step < 1 || step > span) {
      bad_field("has the step " + std::string(text) + "; a step is 1 to " + std::to_string(span));
    }
    return step;
  }

  int parse_value(std::string_view text, std::string_view item) const {
    if (text.empty()) bad_field("has the item '" + std::string(item) + "' with a number missing");
    int value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (end == text.data() + text.size() && error != std::errc::invalid_argument) {
      if (error != std::errc{} || value < field_.min || value > field_.max) {
        bad_field("holds " + std::string(text) + ", outside " + std::to_string(field_.min) + "-" +
                  std::to_string(field_.max));
      }
      return value;
    }
    const std::string name = lower(text);
    for (std::size_t i = 0; i < field_.names.size(); ++i) {
      if (field_.names[i] == name) return field_.min + static_cast<int>(i);
    }
    bad_field("holds '" + std::string(text) + "', which is not a number" +
              (field_.names.empty() ? "" : " or " + std::string(field_.names_hint)));
  }

  std::string_view expression_;
  const Field& field_;
  std::string_view text_;
};

}  // namespace

Cron Cron::parse(std::string_view expression) {
  std::vector<std::string_view> fields = split_fields(expression);
  if (fields.empty()) bad(expression, "it is empty; " + std::string(kHowTo));
  if (fields[0].starts_with('@')) fields = expand_macro(expression, fields);
  if (fields.size() != 5) {
    bad(expression, "it has " + std::to_string(fields.size()) +
                        (fields.size() == 1 ? " field; " : " fields; ") + std::string(kHowTo));
  }
  std::array<std::uint64_t, 5> masks{};
  for (std::size_t i = 0; i < fields.size(); ++i) {
    masks[i] = FieldParser(expression, kFields[i], fields[i]).parse();
  }
  Cron cron;
  cron.text_ = std::string(expression);
  cron.minutes_ = masks[0];
  cron.hours_ = masks[1];
  cron.days_of_month_ = masks[2];
  cron.months_ = masks[3];
  cron.days_of_week_ = masks[4] | ((masks[4] >> 7) & 1);  // Sunday as 7 is Sunday as 0
  // Vixie cron's rule: a day field that starts with '*' ("*", "*/2") does not restrict the
  // day, even when stepped; only two restricting fields are combined with OR.
  cron.days_of_month_restricted_ = !fields[2].starts_with('*');
  cron.days_of_week_restricted_ = !fields[4].starts_with('*');
  return cron;
}

bool Cron::day_matches(unsigned day_of_month, unsigned day_of_week) const {
  const bool by_month = days_of_month_.test(day_of_month);
  const bool by_week = days_of_week_.test(day_of_week);
  if (days_of_month_restricted_ && days_of_week_restricted_) return by_month || by_week;
  return by_month && by_week;
}

std::optional<int> Cron::first_minute_of_day_from(int minute_of_day) const {
  for (int hour = minute_of_day / 60; hour < 24; ++hour) {
    if (!hours_.test(hour)) continue;
    for (int minute = hour == minute_of_day / 60 ? minute_of_day % 60 : 0; minute < 60; ++minute) {
      if (minutes_.test(minute)) return hour * 60 + minute;
    }
  }
  return std::nullopt;
}

// Walks forward a day at a time, a month at a time through months that do not match, and
// looks for the first matching minute only on days that match; so a search costs at most a few
// thousand steps however rare the schedule.
std::optional<std::int64_t> Cron::next_after(std::int64_t after_ms) const {
  if (after_ms < kEarliestMs || after_ms >= kEndMs) return std::nullopt;
  const auto first = chrono::floor<chrono::minutes>(
                         chrono::sys_time<chrono::milliseconds>(chrono::milliseconds(after_ms))) +
                     chrono::minutes(1);
  chrono::sys_days day = chrono::floor<chrono::days>(first);
  int from_minute = static_cast<int>((first - day).count());
  const chrono::sys_days end = day + kSearchSpan;
  while (day < end) {
    const chrono::year_month_day date(day);
    if (!months_.test(static_cast<unsigned>(date.month()))) {
      const chrono::year_month next_month = date.year() / date.month() + chrono::months(1);
      day = chrono::sys_days(next_month / 1);
      from_minute = 0;
      continue;
    }
    if (day_matches(static_cast<unsigned>(date.day()), chrono::weekday(day).c_encoding())) {
      if (const auto minute = first_minute_of_day_from(from_minute)) {
        const auto at = chrono::sys_time<chrono::milliseconds>(day + chrono::minutes(*minute));
        return at.time_since_epoch().count();
      }
    }
    day += chrono::days(1);
    from_minute = 0;
  }
  return std::nullopt;
}

}  // namespace durable::detail
