// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading a run's stream (Step::write_stream) with a wait, written once for Runtime::read_stream,
// Client::read_stream and the durable command: read the store; if nothing is there from the
// offset and the stream is open, wait on a ChangeWatch for a change of (run, stream), and read
// again. The HTTP API's Server-Sent Events wait the same way without a thread (stream_route.cpp).

#include <chrono>
#include <durable/info.hpp>
#include <functional>
#include <string_view>

#include "change_watch.hpp"
#include "store.hpp"

namespace durable::detail {

/// The most values one read returns: a reader further behind reads again from `next`.
inline constexpr std::size_t kStreamReadLimit = 1000;

/// The store's offset for a reader's `from`: one past any a stream can have reads as its end.
std::int64_t stream_offset(std::size_t from);

/// What the store read of a stream from offset `from`, as Runtime::read_stream answers it.
/// Throws NotFound when the run was not found.
StreamRead stream_read_of(std::string_view run_id, const StreamRows& rows, std::size_t from);

/// The stream's values from `from` (up to kStreamReadLimit); when there are none and the stream
/// is open, waits up to `wait` (none when zero or negative) for a value or the close. `read`
/// reads the store at an offset (taking whatever lock its store needs). Throws Error for a bad
/// name (`who` names the call in the message), NotFound for an unknown run.
StreamRead wait_stream(ChangeWatch& watch, std::string_view run_id, std::string_view stream,
                       std::size_t from, std::chrono::milliseconds wait,
                       const std::function<StreamRows(std::int64_t from)>& read,
                       std::string_view who);

}  // namespace durable::detail
