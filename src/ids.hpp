// SPDX-License-Identifier: Apache-2.0
#pragma once
// Run ids, correlation ids, step ids, and the cursors of run lists.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail {

/// A new id: 12 hex digits of the current time in milliseconds then 16 random hex digits, so
/// ids sort by creation time and do not collide across processes.
std::string new_id();

/// Throws Error when id is not a valid step id: empty, or holding '/', '#', '[' or ']' (durable
/// builds journal keys with them) or a control character.
void check_step_id(std::string_view id);

/// Where a run stands in a list's order, newest first (RunInfo::cursor): its creation time and
/// its row's place in the table, which breaks ties of the time.
struct RunCursor {
  std::int64_t created_ms = 0, row = 0;
};
std::string to_string(const RunCursor& cursor);
/// The cursor that `text` names, or nullopt for text to_string() does not make.
std::optional<RunCursor> parse_run_cursor(std::string_view text);
/// parse_run_cursor(), throwing Error for text it cannot read.
RunCursor checked_run_cursor(std::string_view text);

}  // namespace durable::detail
