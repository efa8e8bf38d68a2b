// SPDX-License-Identifier: Apache-2.0
// Cron expressions: parsing, the errors for bad ones, and when a schedule fires next (UTC).

#include "cron.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <ctime>
#include <durable/errors.hpp>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

using namespace durable::detail;

namespace {

// Y-M-D h:m in UTC as ms since the Unix epoch.
std::int64_t utc(int year, int month, int day, int hour = 0, int minute = 0) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  return static_cast<std::int64_t>(timegm(&tm)) * 1000;
}

std::optional<std::int64_t> next(std::string_view expression, std::int64_t after_ms) {
  return Cron::parse(expression).next_after(after_ms);
}

// The what() of the Error that parsing `expression` throws.
std::string parse_error(std::string_view expression) {
  try {
    (void)Cron::parse(expression);
  } catch (const durable::Error& error) {
    return error.what();
  }
  return "(parsed without an error)";
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// A failed CHECK shows a time as its ms and its UTC date, so a wrong answer reads at a glance.
template <>
struct doctest::StringMaker<std::optional<std::int64_t>> {
  static doctest::String convert(const std::optional<std::int64_t>& ms) {
    if (!ms) return "nullopt";
    const std::time_t seconds = static_cast<std::time_t>(*ms / 1000);
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &tm);
    return (std::to_string(*ms) + " (" + date + " UTC)").c_str();
  }
};

TEST_CASE("the cron test's utc helper agrees with known epoch times") {
  CHECK(utc(1970, 1, 1) == 0);
  CHECK(utc(2025, 1, 1) == 1735689600000);
  CHECK(utc(2028, 2, 29, 12, 30) == 1835440200000);
}

TEST_CASE("a cron of every minute fires at the next whole minute") {
  CHECK(next("* * * * *", utc(2025, 6, 2, 12, 0) + 30'500) == utc(2025, 6, 2, 12, 1));
  CHECK(next("* * * * *", utc(2025, 6, 2, 12, 0) + 1) == utc(2025, 6, 2, 12, 1));
  CHECK(next("* * * * *", utc(2025, 6, 2, 23, 59) + 1) == utc(2025, 6, 3, 0, 0));
}

TEST_CASE("a cron fires strictly after the given time, even when that time matches") {
  CHECK(next("* * * * *", utc(2025, 6, 2, 12, 0)) == utc(2025, 6, 2, 12, 1));
  CHECK(next("0 12 * * *", utc(2025, 6, 2, 12, 0)) == utc(2025, 6, 3, 12, 0));
  CHECK(next("0 12 * * *", utc(2025, 6, 2, 12, 0) - 1) == utc(2025, 6, 2, 12, 0));
  CHECK(next("@yearly", utc(2026, 1, 1)) == utc(2027, 1, 1));
}

TEST_CASE("a cron step of 15 minutes fires on the quarter hours") {
  CHECK(next("*/15 * * * *", utc(2025, 6, 2, 12, 1)) == utc(2025, 6, 2, 12, 15));
  CHECK(next("*/15 * * * *", utc(2025, 6, 2, 12, 15)) == utc(2025, 6, 2, 12, 30));
  CHECK(next("*/15 * * * *", utc(2025, 6, 2, 12, 50)) == utc(2025, 6, 2, 13, 0));
  SUBCASE("a step from a start value runs to the field's end") {
    CHECK(next("5/15 * * * *", utc(2025, 6, 2, 12, 0)) == utc(2025, 6, 2, 12, 5));
    CHECK(next("5/15 * * * *", utc(2025, 6, 2, 12, 35)) == utc(2025, 6, 2, 12, 50));
    CHECK(next("5/15 * * * *", utc(2025, 6, 2, 12, 50)) == utc(2025, 6, 2, 13, 5));
  }
}

TEST_CASE("a cron range matches each value in it, and a stepped range every nth") {
  CHECK(next("30 9-17 * * *", utc(2025, 6, 2, 8, 0)) == utc(2025, 6, 2, 9, 30));
  CHECK(next("30 9-17 * * *", utc(2025, 6, 2, 16, 30)) == utc(2025, 6, 2, 17, 30));
  CHECK(next("30 9-17 * * *", utc(2025, 6, 2, 17, 30)) == utc(2025, 6, 3, 9, 30));
  CHECK(next("0 9-17/4 * * *", utc(2025, 6, 2, 9, 0)) == utc(2025, 6, 2, 13, 0));
  CHECK(next("0 9-17/4 * * *", utc(2025, 6, 2, 13, 0)) == utc(2025, 6, 2, 17, 0));
  CHECK(next("0 9-17/4 * * *", utc(2025, 6, 2, 17, 0)) == utc(2025, 6, 3, 9, 0));
}

TEST_CASE("a cron list matches any of its items") {
  CHECK(next("0,30 8,20 * * *", utc(2025, 6, 2, 8, 0)) == utc(2025, 6, 2, 8, 30));
  CHECK(next("0,30 8,20 * * *", utc(2025, 6, 2, 8, 30)) == utc(2025, 6, 2, 20, 0));
  CHECK(next("0,30 8,20 * * *", utc(2025, 6, 2, 20, 30)) == utc(2025, 6, 3, 8, 0));
  // Minutes 0, 1, 2, 3, 10, 20 and 40.
  CHECK(next("1-3,10,*/20 * * * *", utc(2025, 6, 2, 12, 3)) == utc(2025, 6, 2, 12, 10));
  CHECK(next("1-3,10,*/20 * * * *", utc(2025, 6, 2, 12, 10)) == utc(2025, 6, 2, 12, 20));
  CHECK(next("1-3,10,*/20 * * * *", utc(2025, 6, 2, 12, 40)) == utc(2025, 6, 2, 13, 0));
}

TEST_CASE("cron month and weekday names work in any case and in ranges") {
  CHECK(next("0 0 1 JUN,dec *", utc(2025, 1, 1)) == utc(2025, 6, 1));
  CHECK(next("0 0 1 JUN,dec *", utc(2025, 6, 1)) == utc(2025, 12, 1));
  // 2025-06-07 is a Saturday.
  CHECK(next("0 12 * * Mon-fri", utc(2025, 6, 7)) == utc(2025, 6, 9, 12, 0));
  CHECK(next("0 12 * * Mon-fri", utc(2025, 6, 9, 12, 0)) == utc(2025, 6, 10, 12, 0));
  CHECK(next("0 0 * jan-Mar/2 *", utc(2025, 1, 31)) == utc(2025, 3, 1));
  for (const std::int64_t after : {utc(2025, 6, 4), utc(2025, 6, 7, 13, 0), utc(2025, 12, 31)}) {
    CAPTURE(after);
    CHECK(next("0 12 * * MON-FRI", after) == next("0 12 * * 1-5", after));
    CHECK(next("0 0 * * sun", after) == next("0 0 * * 0", after));
  }
}

TEST_CASE("cron day-of-week takes Sunday as both 0 and 7") {
  // 2025-06-04 is a Wednesday, 2025-06-08 the Sunday after it.
  CHECK(next("0 0 * * 0", utc(2025, 6, 4)) == utc(2025, 6, 8));
  CHECK(next("0 0 * * 7", utc(2025, 6, 4)) == utc(2025, 6, 8));
  CHECK(next("0 0 * * 5-7", utc(2025, 6, 4)) == utc(2025, 6, 6));
  CHECK(next("0 0 * * 5-7", utc(2025, 6, 6)) == utc(2025, 6, 7));
  CHECK(next("0 0 * * 5-7", utc(2025, 6, 7)) == utc(2025, 6, 8));
  CHECK(next("0 0 * * 5-7", utc(2025, 6, 8)) == utc(2025, 6, 13));
}

TEST_CASE("a cron restricting both day fields fires on a day matching either") {
  // The 13th or any Friday. 2025-06-06 and 2025-06-13 are Fridays; 2025-07-13 is a Sunday.
  CHECK(next("0 0 13 * 5", utc(2025, 6, 1)) == utc(2025, 6, 6));
  CHECK(next("0 0 13 * 5", utc(2025, 6, 6)) == utc(2025, 6, 13));
  CHECK(next("0 0 13 * 5", utc(2025, 6, 13)) == utc(2025, 6, 20));
  CHECK(next("0 0 13 * fri", utc(2025, 7, 11)) == utc(2025, 7, 13));
  SUBCASE("a day field starting with '*' restricts nothing, so both must match") {
    // Odd days that are Fridays: not 2025-06-06, but 2025-06-13.
    CHECK(next("0 0 */2 * 5", utc(2025, 6, 1)) == utc(2025, 6, 13));
    CHECK(next("0 0 13 * *", utc(2025, 7, 1)) == utc(2025, 7, 13));
    CHECK(next("0 0 * * 5", utc(2025, 7, 11)) == utc(2025, 7, 18));
  }
}

TEST_CASE("a cron skips months too short for its day, and finds the leap day") {
  CHECK(next("0 0 31 * *", utc(2025, 4, 1)) == utc(2025, 5, 31));
  CHECK(next("0 0 31 * *", utc(2025, 5, 31)) == utc(2025, 7, 31));
  CHECK(next("0 0 30 * *", utc(2025, 1, 30)) == utc(2025, 3, 30));
  CHECK(next("0 0 29 2 *", utc(2025, 1, 1)) == utc(2028, 2, 29));
  CHECK(next("0 0 29 2 *", utc(2028, 2, 29)) == utc(2032, 2, 29));
}

TEST_CASE("a cron rolls over into the next year") {
  CHECK(next("0 0 1 1 *", utc(2025, 12, 31, 23, 59)) == utc(2026, 1, 1));
  CHECK(next("59 23 31 12 *", utc(2025, 12, 31, 23, 59)) == utc(2026, 12, 31, 23, 59));
  CHECK(next("* * * * *", utc(2026, 1, 1) - 1) == utc(2026, 1, 1));
  CHECK(next("0 0 * jan *", utc(2025, 2, 1)) == utc(2026, 1, 1));
}

TEST_CASE("cron macros stand for their five-field expressions") {
  const std::int64_t monday_noon = utc(2025, 6, 2, 12, 0);
  CHECK(next("@hourly", monday_noon) == utc(2025, 6, 2, 13, 0));
  CHECK(next("@daily", monday_noon) == utc(2025, 6, 3));
  CHECK(next("@midnight", monday_noon) == utc(2025, 6, 3));
  CHECK(next("@weekly", monday_noon) == utc(2025, 6, 8));
  CHECK(next("@monthly", monday_noon) == utc(2025, 7, 1));
  CHECK(next("@yearly", monday_noon) == utc(2026, 1, 1));
  CHECK(next("@annually", monday_noon) == utc(2026, 1, 1));
  CHECK(next("  @Daily\t", monday_noon) == utc(2025, 6, 3));
}

TEST_CASE("cron fields may be separated by several spaces and tabs") {
  const Cron cron = Cron::parse("\t 0\t12  *   * \t *  ");
  CHECK(cron.next_after(utc(2025, 6, 2)) == utc(2025, 6, 2, 12, 0));
  CHECK(cron.text() == "\t 0\t12  *   * \t *  ");
}

TEST_CASE("a cron that never matches has no next time") {
  CHECK(next("0 0 30 2 *", utc(2025, 1, 1)) == std::nullopt);
  CHECK(next("0 0 31 4,6,9,11 *", utc(2025, 1, 1)) == std::nullopt);
  CHECK(Cron::parse("0 0 30 2 *").text() == "0 0 30 2 *");
}

TEST_CASE("cron times before the epoch work, and times outside years 1 to 9999 have none") {
  CHECK(next("0 0 1 1 *", utc(1969, 6, 1)) == 0);
  CHECK(next("* * * * *", -1) == 0);
  CHECK(next("* * * * *", -60'001) == -60'000);
  CHECK(next("* * * * *", std::numeric_limits<std::int64_t>::max()) == std::nullopt);
  CHECK(next("* * * * *", std::numeric_limits<std::int64_t>::min()) == std::nullopt);
}

TEST_CASE("a bad cron expression throws an Error naming the expression, field and fault") {
  struct BadCase {
    std::string_view expression;
    std::string_view where;  // the field, as the message names it
    std::string_view fault;
  };
  constexpr std::array<BadCase, 28> kCases = {{
      {"", "it is empty", "minute hour day-of-month month day-of-week"},
      {" \t ", "it is empty", "@daily"},
      {"* * * *", "it has 4 fields", "minute hour day-of-month month day-of-week"},
      {"* * * * * *", "it has 6 fields", "write 5 fields"},
      {"60 * * * *", "the minute field '60'", "holds 60, outside 0-59"},
      {"0 24 * * *", "the hour field '24'", "holds 24, outside 0-23"},
      {"0 0 0 * *", "the day-of-month field '0'", "holds 0, outside 1-31"},
      {"0 0 32 * *", "the day-of-month field '32'", "holds 32, outside 1-31"},
      {"0 0 99999999999 * *", "the day-of-month field '99999999999'", "outside 1-31"},
      {"0 0 * 13 *", "the month field '13'", "holds 13, outside 1-12"},
      {"0 0 * 0 *", "the month field '0'", "holds 0, outside 1-12"},
      {"0 0 * * 8", "the day-of-week field '8'", "holds 8, outside 0-7"},
      {"0 0 * * 1-9", "the day-of-week field '1-9'", "holds 9, outside 0-7"},
      {"*/0 * * * *", "the minute field '*/0'", "a step is 1 to 60"},
      {"0 */25 * * *", "the hour field '*/25'", "a step is 1 to 24"},
      {"*/x * * * *", "the minute field '*/x'", "the step 'x', which is not a number"},
      {"*/ * * * *", "the minute field '*/'", "which is not a number"},
      {"0 5-3 * * *", "the hour field '5-3'",
       "runs backwards; write a range that wraps as two, "
       "like 5-23,0-3"},
      {"0 0 * dec-jan *", "the month field 'dec-jan'", "runs backwards"},
      {"0 0 * foo *", "the month field 'foo'", "not a number or a month name (jan..dec)"},
      {"0 0 * * funday", "the day-of-week field 'funday'", "or a day name (sun..sat)"},
      {"0 mon * * *", "the hour field 'mon'", "holds 'mon', which is not a number"},
      {"0 1,,2 * * *", "the hour field '1,,2'", "has an empty item"},
      {"0 1, * * *", "the hour field '1,'", "has an empty item"},
      {"0 -1 * * *", "the hour field '-1'", "with a number missing"},
      {"@often", "@often is not a macro", "@hourly"},
      {"@reboot", "@reboot is not a macro", "@daily"},
      {"@daily 5", "a macro such as @daily stands alone", "no fields after it"},
  }};
  for (const BadCase& bad : kCases) {
    CAPTURE(bad.expression);
    const std::string message = parse_error(bad.expression);
    CAPTURE(message);
    CHECK(contains(message, "'" + std::string(bad.expression) + "' is not a cron expression: "));
    CHECK(contains(message, bad.where));
    CHECK(contains(message, bad.fault));
  }
}
