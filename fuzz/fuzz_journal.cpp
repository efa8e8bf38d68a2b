// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of the decoding of the JSON text the store reads back (a step's output and
// error, a run's input and result: SqlTables::stored, which scans the depth before it parses),
// and of what durable then does with the value: an error read back from it, the dumps that put
// a value in a message, and encode(), which writes a value to store it. A database written by
// an older durable or another tool may hold any text there.
//
// Beyond the sanitizers, a bug here is an exception out of error_from_json (an error another
// tool wrote is read as it is, so that a claim cannot fail on it), a value encode() accepts
// that does not read back equal, and utf8_or_replaced giving text that is not UTF-8.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <durable/errors.hpp>
#include <string>
#include <string_view>

#include "serialization.hpp"

namespace {

using durable::json;

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "fuzz_journal: %s: '%.*s'\n", what, static_cast<int>(text.size()),
               text.data());
  std::abort();
}

void check_utf8(std::string_view text) {
  const std::string replaced = durable::detail::utf8_or_replaced(text);
  if (!durable::detail::is_utf8(replaced))
    fail("utf8_or_replaced gave text that is not UTF-8", text);
  if (durable::detail::is_utf8(text) && replaced != text) fail("valid UTF-8 was changed", text);
}

void check_value(const json& value, std::string_view text) {
  (void)durable::detail::error_from_json(value);
  (void)durable::detail::lenient_dump(value);
  if (durable::detail::shortened_dump(value, 50).size() > 53) fail("a dump not shortened", text);
  std::string encoded;
  if (durable::detail::encode(value, encoded)) return;  // refused, with the reason
  if (json::parse(encoded, nullptr, false) != value)
    fail("an encoded value reads back changed", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_utf8(text);
  if (durable::detail::too_deep_text(text, durable::detail::kMaxStoredDepth)) return 0;
  const json value = json::parse(text, nullptr, false);
  if (!value.is_discarded()) check_value(value, text);
  return 0;
}
