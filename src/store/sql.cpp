// SPDX-License-Identifier: Apache-2.0
#include "store/sql.hpp"

namespace durable::detail::sql {

std::string placeholders(std::size_t n) {
  std::string text;
  for (std::size_t i = 0; i < n; ++i) text += i == 0 ? "?" : ", ?";
  return text;
}

}  // namespace durable::detail::sql
