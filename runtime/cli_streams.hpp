// SPDX-License-Identifier: Apache-2.0
#pragma once
// `durable tail RUN STREAM [--from N]` (runtime/cli_streams.cpp).

#include <string>

#include "admin.hpp"

namespace durable::detail::cli {

/// Prints the values of run `run`'s stream `stream` from offset `from` (text of a whole number,
/// empty: 0), one JSON text per line as each is written (with `as_json`, {"offset": N, "value":
/// V} per line), following the stream until it is closed or the run ends; then returns 0.
/// Throws ops::BadRequest for a bad name or --from, NotFound for an unknown run.
int tail_command(ops::Admin& admin, const std::string& run, const std::string& stream,
                 const std::string& from, bool as_json);

}  // namespace durable::detail::cli
