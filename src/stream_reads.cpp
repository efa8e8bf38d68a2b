// SPDX-License-Identifier: Apache-2.0
#include "stream_reads.hpp"

#include <algorithm>
#include <limits>

#include "ids.hpp"
#include "published.hpp"
#include "run_requests.hpp"

namespace durable::detail {

std::int64_t stream_offset(std::size_t from) {
  return static_cast<std::int64_t>(
      std::min<std::size_t>(from, std::numeric_limits<std::int64_t>::max()));
}

StreamRead stream_read_of(std::string_view run_id, const StreamRows& rows, std::size_t from) {
  if (!rows.run_found) throw no_such_run(run_id);
  StreamRead read;
  read.values.reserve(rows.values.size());
  for (const std::string& text : rows.values) read.values.push_back(json::parse(text));
  read.next = from + read.values.size();
  // Closed once nothing is left to read past what this read returned.
  read.closed = rows.closed && static_cast<std::int64_t>(read.next) >= rows.length;
  return read;
}

StreamRead wait_stream(ChangeWatch& watch, std::string_view run_id, std::string_view stream,
                       std::size_t from, std::chrono::milliseconds wait,
                       const std::function<StreamRows(std::int64_t from)>& read,
                       std::string_view who) {
  check_stream_name(stream, who);
  const std::int64_t offset = stream_offset(from);
  using Answer = std::optional<StreamRead>;  // empty: wait for a change
  return watch.read_until_changed(run_id, stream, watch.deadline_after(wait), [&](bool last) {
    StreamRead now = stream_read_of(run_id, read(offset), from);
    if (!now.values.empty() || now.closed || last) return Answer(std::move(now));
    return Answer();
  });
}

}  // namespace durable::detail
