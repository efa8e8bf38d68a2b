// SPDX-License-Identifier: Apache-2.0
// WIP (issue 17): a libFuzzer harness, built by hand so far:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc -Iruntime ...
#include <cstdint>
#include <string_view>
#include <durable/errors.hpp>
#include "serialization.hpp"
#include "journal.hpp"
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)durable::detail::utf8_or_replaced(text);
  (void)durable::detail::is_utf8(text);
  if (durable::detail::too_deep_text(text, 64)) return 0;
  const durable::json value = durable::json::parse(text, nullptr, false);
  if (value.is_discarded()) return 0;
  (void)durable::detail::lenient_dump(value);
  (void)durable::detail::shortened_dump(value, 50);
  try { (void)durable::detail::error_from_json(value); } catch (const std::exception&) {}
  std::string out;
  (void)durable::detail::encode(value, out);
  return 0;
}
