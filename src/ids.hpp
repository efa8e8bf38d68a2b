// SPDX-License-Identifier: Apache-2.0
#pragma once
// Run ids, correlation ids and step ids.

#include <string>
#include <string_view>

namespace durable::detail {

/// A new id: 12 hex digits of the current time in milliseconds then 16 random hex digits, so
/// ids sort by creation time and do not collide across processes.
std::string new_id();

/// Throws Error when id is not a valid step id: empty, or holding '/', '#', '[' or ']' (durable
/// builds journal keys with them) or a control character.
void check_step_id(std::string_view id);

}  // namespace durable::detail
