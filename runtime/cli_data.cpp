// SPDX-License-Identifier: Apache-2.0
// The durable command and payloads at rest; see cli_data.hpp.

#include "cli_data.hpp"

#include <chrono>

#include "env.hpp"
#include "runtime_core.hpp"
#include "store.hpp"

namespace durable::detail::cli {

std::shared_ptr<const Payloads>& payloads() {
  static std::shared_ptr<const Payloads> command;
  return command;
}

std::shared_ptr<const Payloads> command_payloads(Runtime* app, const std::string& key_file) {
  std::optional<Codec> codec;
  std::string file = key_file;
  if (app != nullptr) {
    const RuntimeOptions& options = RuntimeAccess::core(*app).options();
    codec = options.codec;
    if (file.empty()) file = options.encryption_key_file;
  }
  return std::make_shared<const Payloads>(std::move(codec), file);
}

json forget(const std::string& database, const std::string& correlation_id) {
  if (!payloads() || !payloads()->encrypts()) {
    throw Error(errc::config,
                "forget needs --key-file F: the encryption key file the database's runtime uses");
  }
  const auto store = open_store(database, Durability::normal, payloads());
  const std::int64_t now = Env::system().now_ms();
  return {{"correlation_id", correlation_id}, {"cancelled", store->forget(correlation_id, now)}};
}

}  // namespace durable::detail::cli
