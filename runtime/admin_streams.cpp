// SPDX-License-Identifier: Apache-2.0
// An Admin's reads of runs' streams (Step::write_stream), for GET /v1/runs/{id}/streams[/{name}]
// and the durable command.

#include "admin.hpp"
#include "admin_pool.hpp"
#include "durations.hpp"
#include "errors_internal.hpp"
#include "ids.hpp"
#include "run_requests.hpp"
#include "store.hpp"
#include "stream_reads.hpp"

namespace durable::ops {

json Admin::streams(std::string_view id) {
  const Lease db = lease();
  const auto streams = db->store->streams_of(std::string(id));
  if (!streams) throw detail::no_such_run(id);
  json list = json::array();
  for (const detail::StreamSummary& s : *streams) {
    list.push_back({{"name", s.name},
                    {"length", s.length},
                    {"closed", s.closed},
                    {"updated_at", detail::utc_text(s.updated_at_ms)}});
  }
  return {{"streams", std::move(list)}};
}

StreamRead Admin::stream_now(std::string_view id, std::string_view name, std::size_t from) {
  try {
    detail::check_stream_name(name, "GET /v1/runs/{id}/streams/{name}");
  } catch (const Error& e) {
    throw BadRequest(std::string(detail::message_of(e)));
  }
  const Lease db = lease();
  return detail::stream_read_of(
      id,
      db->store->read_stream(std::string(id), std::string(name), detail::stream_offset(from),
                             detail::kStreamReadLimit),
      from);
}

}  // namespace durable::ops
