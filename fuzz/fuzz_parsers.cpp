// SPDX-License-Identifier: Apache-2.0
// WIP (issue 17): a libFuzzer harness, built by hand so far:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc -Iruntime ...
#include <cstdint>
#include <string_view>
#include <durable/errors.hpp>
#include "durations.hpp"
#include "cron.hpp"
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try { (void)durable::detail::parse_duration(text); } catch (const durable::Error&) {}
  try {
    const auto cron = durable::detail::Cron::parse(text);
    (void)cron.next_after(1'790'000'000'000);
  } catch (const durable::Error&) {}
  (void)durable::detail::parse_utc_text(text);
  return 0;
}
