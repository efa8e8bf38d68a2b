// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a start or an event sent writes, built and checked the same way whoever asks: a Runtime,
// a Client or the admin layer (the command and the HTTP API). One rule each, so that the same
// bad input gets the same error from all of them.

#include <cstddef>
#include <cstdint>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <string>
#include <string_view>

#include "store.hpp"

namespace durable::detail {

/// The run to write for a start of `workflow`: the input's stored text, a new id, the
/// correlation id asked for (a new one when empty), the idempotency key, and due at `opts.at`
/// (never before now_ms). Throws Error for an empty workflow name, and (from storable_text) for
/// an input that cannot be stored or whose text is longer than `max_bytes`.
NewRun new_run(std::string_view workflow, const json& input, const StartOptions& opts,
               std::int64_t now_ms, std::size_t max_bytes);

/// Says in the run's history that no worker has registered its workflow yet: the run waits for
/// one that has it.
void mark_unregistered(NewRun& run);

/// The event to store for send_event(name, data). Throws Error for an empty name, and (from
/// storable_text) for data that cannot be stored or whose text is longer than `max_bytes`.
NewEvent new_event(std::string_view name, const json& data, std::int64_t now_ms,
                   std::size_t max_bytes);

/// The NotFound for a run id the database does not hold.
NotFound no_such_run(std::string_view run_id);

/// Whether a run with this status has ended: completed, failed or cancelled (what wait() waits
/// for; a failed run may still be retried).
inline bool ended(Status status) {
  return status == Status::completed || status == Status::failed || status == Status::cancelled;
}

}  // namespace durable::detail
