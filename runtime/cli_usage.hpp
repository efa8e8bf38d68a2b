// SPDX-License-Identifier: Apache-2.0
#pragma once
// The durable command's help text (`durable --help`).

namespace durable::detail::cli {

extern const char* const kUsageText;

}  // namespace durable::detail::cli
