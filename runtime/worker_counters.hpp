// SPDX-License-Identifier: Apache-2.0
#pragma once
// A runtime's Counters as its heartbeat stores them in its workers row (workers.counters, JSON
// text), so that /metrics, read by any process on the database, exports every live worker's.
// The one list of the figures: the heartbeat writes by it and /metrics reads by it.

#include <array>
#include <cstdint>
#include <durable/info.hpp>
#include <string>

namespace durable::detail {

/// One of Counters' figures.
struct CounterField {
  const char* name;  ///< its key in workers.counters; /metrics: durable_worker_<name>_total
  std::uint64_t Counters::*value;
  const char* help;  ///< what it counts, for the metric's HELP line
};

extern const std::array<CounterField, 9> kCounterFields;

/// The counters as workers.counters holds them: {"runs_started": n, ...}.
std::string counters_json(const Counters& counters);

}  // namespace durable::detail
