// SPDX-License-Identifier: Apache-2.0
#pragma once
// `durable published RUN KEY [--wait MS]` (runtime/cli_published.cpp).

#include <string>

#include "admin.hpp"

namespace durable::detail::cli {

/// Prints the JSON value run `run` published under `key` (as JSON text on one line; with
/// `as_json`, the HTTP answer {"published": true, "value": V}) and returns 0; waits up to
/// `wait_ms` (text of whole milliseconds, empty: none) for it. When there is none: a message on
/// stderr (with `as_json`, {"published": false} on stdout) and 1. Throws ops::BadRequest for a
/// bad key or --wait, NotFound for an unknown run.
int published_command(ops::Admin& admin, const std::string& run, const std::string& key,
                      const std::string& wait_ms, bool as_json);

}  // namespace durable::detail::cli
