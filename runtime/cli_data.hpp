// SPDX-License-Identifier: Apache-2.0
#pragma once
// The durable command and payloads at rest: the codec its stores use (the application's
// RuntimeOptions::codec, and --key-file), and `durable forget`.

#include <durable/runtime.hpp>
#include <memory>
#include <string>

namespace durable::detail {
class Payloads;
}

namespace durable::detail::cli {

/// The payload codec of the command under way, which every store and admin it opens uses: set
/// once by cli_main, after the command line is checked and before the command runs.
std::shared_ptr<const Payloads>& payloads();
/// The application's codec (RuntimeOptions::codec of `app`, when given) with the key file
/// (--key-file; else the application's encryption_key_file). Throws Error for a bad key file.
std::shared_ptr<const Payloads> command_payloads(Runtime* app, const std::string& key_file);
/// Store::forget of the correlation id, with payloads(): {"correlation_id", "cancelled": [ids]}.
/// Throws Error when no key file is given.
json forget(const std::string& database, const std::string& correlation_id);

}  // namespace durable::detail::cli
