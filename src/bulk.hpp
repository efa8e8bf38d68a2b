// SPDX-License-Identifier: Apache-2.0
#pragma once
// Bulk actions by filter (Runtime::cancel, retry, purge and count of a RunFilter), written once
// for the runtime and the admin layer (the command and the HTTP API).

#include <cstddef>
#include <cstdint>
#include <durable/options.hpp>
#include <functional>
#include <string>

#include "store.hpp"

namespace durable::detail {

enum class BulkAction { cancel, retry, purge };

/// A filter whose status the action does not act on (retry of completed runs).
struct BadFilter : Error {
  explicit BadFilter(const std::string& what) : Error(errc::bad_request, what) {}
};

/// "cancel", "retry", "purge".
const char* to_string(BulkAction action);

/// Calls `use` with the store, held for that call only: the runtime's lock is taken and released
/// around each batch, so that the workers' own writes go on between them.
using WithStore = std::function<void(const std::function<void(Store&)>& use)>;

/// How many runs `action` would change: those the filter matches (whatever its limit) whose
/// status it acts on. Throws BadFilter for a filter status it does not act on.
std::size_t bulk_count(const WithStore& store, BulkAction action, const RunFilter& filter);
/// Carries the action out on each such run, in batches, and returns how many it changed (a run
/// that changed meanwhile so that the action no longer applies is left). `reason`: a cancel's.
std::size_t bulk_apply(const WithStore& store, BulkAction action, const RunFilter& filter,
                       const std::string& reason, const std::function<std::int64_t()>& now_ms);

}  // namespace durable::detail
