// SPDX-License-Identifier: Apache-2.0
#pragma once
// The migrations of the PostgreSQL store's schema; only the PostgreSQL store uses them.

#include <array>

namespace durable::detail::pg {

/// The PostgreSQL schema version this build writes.
inline constexpr int kPgSchemaVersion = 14;

/// kPgMigrations[v] upgrades a schema from version v to v + 1, in the store's open transaction;
/// 0 creates the tables in an empty schema.
extern const std::array<const char*, kPgSchemaVersion> kPgMigrations;

/// The table that marks a schema as durable's and holds its version; its name is durable's own,
/// so that a foreign schema with a `runs` table is told apart.
inline constexpr const char* kVersionTable = "durable_schema_version";

}  // namespace durable::detail::pg
