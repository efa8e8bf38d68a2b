// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading published values (Step::publish) with a wait, written once for Runtime::published,
// Client::published and the durable command: read the store; if the key has no value yet and
// the run goes on, wait on a ChangeWatch for a change of (run, key) and read again.

#include <chrono>
#include <durable/options.hpp>
#include <functional>
#include <optional>
#include <string_view>

#include "change_watch.hpp"
#include "store.hpp"

namespace durable::detail {

/// The key's latest value; when it has none, waits up to `wait` (none when zero or negative)
/// for the run to publish it, and returns nullopt if it does not, or as soon as the run has
/// ended without it. `read` reads the store (taking whatever lock its store needs). Throws Error
/// for a bad key (`who` names the call in the message), NotFound for an unknown run.
std::optional<json> wait_published(ChangeWatch& watch, std::string_view run_id,
                                   std::string_view key, std::chrono::milliseconds wait,
                                   const std::function<PublishedRead()>& read,
                                   std::string_view who);

}  // namespace durable::detail
