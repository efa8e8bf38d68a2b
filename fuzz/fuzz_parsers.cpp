// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of the parsers of text a user or a client writes: durations ("1h30m", a
// step.sleep's or an API deadline's), cron expressions (a schedule's) and UTC times (the API's
// created_after, deadlines). Each input is given to all three.
//
// Beyond the sanitizers, a bug here is an exception other than durable::Error (each parser
// promises Error or nullopt for text it does not take), a cron whose next start is not one it
// would find again, or a UTC time that does not read back as the same time once written.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <durable/errors.hpp>
#include <string_view>

#include "cron.hpp"
#include "durations.hpp"

namespace {

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "fuzz_parsers: %s: '%.*s'\n", what, static_cast<int>(text.size()),
               text.data());
  std::abort();
}

void parse_duration(std::string_view text) {
  try {
    if (durable::detail::parse_duration(text).count() < 0) fail("a negative duration", text);
  } catch (const durable::Error&) {
  }
}

// 2026-09-21T10:00:00Z, a time well inside the years next_after answers for.
constexpr std::int64_t kAfterMs = 1'790'000'000'000;

void parse_cron(std::string_view text) {
  std::optional<durable::detail::Cron> cron;
  try {
    cron = durable::detail::Cron::parse(text);
  } catch (const durable::Error&) {
    return;
  }
  if (cron->text() != text) fail("a cron that does not keep its text", text);
  const auto next = cron->next_after(kAfterMs);
  if (!next) return;
  if (*next <= kAfterMs || *next % 60'000 != 0)
    fail("a next start that is not a later minute", text);
  if (cron->next_after(*next - 1) != next) fail("a next start not found again", text);
}

// utc_text writes years before 1000 as strftime does, without leading zeros, which
// parse_utc_text does not read: those are left out of the round trip.
void parse_utc(std::string_view text) {
  const auto ms = durable::detail::parse_utc_text(text);
  if (!ms || text.starts_with('0')) return;
  if (durable::detail::parse_utc_text(durable::detail::utc_text(*ms)) != ms) {
    fail("a UTC time that does not read back", text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  parse_duration(text);
  parse_cron(text);
  parse_utc(text);
  return 0;
}
