// SPDX-License-Identifier: Apache-2.0
#pragma once
// Cron expressions, for recurring schedules: when a schedule fires next.

#include <bitset>
#include <cstdint>
#include <durable/errors.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail {

/// A parsed 5-field cron expression, evaluated in UTC with Vixie cron's rules. Immutable once
/// parsed, so one Cron may be read from any number of threads.
class Cron {
 public:
  /// Parses "minute hour day-of-month month day-of-week". Fields are separated by any run of
  /// spaces or tabs. Each field is `*`, a number, a range `a-b`, a step `*/n`, `a-b/n` or `a/n`
  /// (from a to the field's largest value), or a comma list of these. Ranges: minute 0-59,
  /// hour 0-23, day-of-month 1-31, month 1-12 or jan..dec, day-of-week 0-7 (0 and 7 are both
  /// Sunday) or sun..sat; names in any case. Also the macros @hourly, @daily (= @midnight),
  /// @weekly, @monthly, @yearly (= @annually).
  /// Throws Error naming the expression, the field and what is wrong with it.
  static Cron parse(std::string_view expression);

  /// The first whole minute strictly after `after_ms` (ms since the Unix epoch, UTC) that the
  /// expression matches, in ms since the epoch. nullopt when nothing matches within the next 5
  /// years ("0 0 30 2 *"), or when `after_ms` lies outside the years 1 to 9999.
  /// When both day-of-month and day-of-week are restricted (neither starts with `*`), a day
  /// matches when either does; otherwise it must match both.
  std::optional<std::int64_t> next_after(std::int64_t after_ms) const;

  /// The expression as given to parse().
  const std::string& text() const { return text_; }

 private:
  Cron() = default;
  bool day_matches(unsigned day_of_month, unsigned day_of_week) const;
  std::optional<int> first_minute_of_day_from(int minute_of_day) const;

  std::string text_;
  // Bit i is set when value i matches. Day-of-week 7 is folded into 0 at parse time.
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_of_month_;  // bits 1-31
  std::bitset<13> months_;         // bits 1-12
  std::bitset<7> days_of_week_;    // 0 is Sunday
  bool days_of_month_restricted_ = false;
  bool days_of_week_restricted_ = false;
};

}  // namespace durable::detail
