// SPDX-License-Identifier: Apache-2.0
#pragma once
// Internal: readable C++ type names for error messages. Not part of the public API.

#include <string_view>

namespace durable::detail {

/// The name of T as the compiler spells it ("int", "std::vector<int>"), for error messages.
template <class T>
constexpr std::string_view type_name() {
  std::string_view p = __PRETTY_FUNCTION__;
#if defined(__clang__)
  constexpr std::string_view key = "T = ";
  const auto end = p.rfind(']');
#else
  constexpr std::string_view key = "T = ";
  auto end = p.find(';', p.find(key));
  if (end == std::string_view::npos) end = p.rfind(']');
#endif
  const auto start = p.find(key) + key.size();
  return p.substr(start, end - start);
}

}  // namespace durable::detail
