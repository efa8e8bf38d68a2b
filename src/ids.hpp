// SPDX-License-Identifier: Apache-2.0
#pragma once
// Run ids, correlation ids, step ids, and the cursors of run lists.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail {

/// A new id of the system's Env (Env::new_id): 12 hex digits of the current time in
/// milliseconds then 16 random hex digits, so ids sort by creation time and do not collide
/// across processes.
std::string new_id();

/// Throws Error when id is not a valid step id: empty, or holding '/', '#', '[' or ']' (durable
/// builds journal keys with them) or a control character.
void check_step_id(std::string_view id);

/// The longest key of a published value (Step::publish) or name of a stream, in bytes.
inline constexpr std::size_t kMaxPublishedKey = 200;
/// Throws Error when `key` is not a valid key of a published value: empty, longer than
/// kMaxPublishedKey bytes, not UTF-8, or holding '/' or a control character (keys appear in
/// URLs: GET /v1/runs/{id}/published/{key}). `where` begins the message ("step.publish").
void check_published_key(std::string_view key, std::string_view where);
/// The same rule for the name of a stream (Step::write_stream; GET /v1/runs/{id}/streams/{name}).
void check_stream_name(std::string_view name, std::string_view where);
/// The journal base of a step.publish of `key`: "[publish:KEY]". No step id begins with '['
/// (check_step_id refuses it) and every such base ends with ']', so neither a step's key nor
/// a repeated publish's ("[publish:KEY]#2") can be taken for another's.
std::string published_base(std::string_view key);
/// The journal base of a step.write_stream or close_stream of `name`: "[stream:NAME]", as above.
std::string stream_base(std::string_view name);
/// The journal base of a step.set_tags: "[tags]", as above.
inline constexpr std::string_view kTagsBase = "[tags]";

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
