// SPDX-License-Identifier: Apache-2.0
#pragma once
// The migrations of the SQLite store's schema; only the SQLite store uses them.

#include <array>

#include "store.hpp"

namespace durable::detail {

/// kMigrations[v] upgrades a database from schema version v to v + 1, in the store's open
/// transaction; 0 creates the schema of a new file.
extern const std::array<const char*, kSchemaVersion> kMigrations;

}  // namespace durable::detail
