// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Where a step tool was called from, for the messages that name a call site.

#include <cstdint>

namespace durable::detail {

/// The file and line of a call, taken as a default argument like std::source_location. durable
/// has its own type because Debian 12's clang (14) with libstdc++ 12 has no
/// std::source_location, and because one type for every compiler keeps the library's ABI the
/// same whichever compiler a program that links it uses. __builtin_FILE and __builtin_LINE are
/// in GCC and in clang.
class SourceLocation {
 public:
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          std::uint_least32_t line = __builtin_LINE()) noexcept {
    SourceLocation where;
    where.file_ = file;
    where.line_ = line;
    return where;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  /// 0: unknown.
  constexpr std::uint_least32_t line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  std::uint_least32_t line_ = 0;
};

}  // namespace durable::detail
