// SPDX-License-Identifier: Apache-2.0
#pragma once
// The spans a commit of a run finished (issue 18), made from what the commit wrote and the
// run's journal: one per step attempt as it is journaled, and, when the run ends, the run's own
// span and one per sleep, event wait and child run it made. Each is made by the one commit that
// finished it, and its id is derived from the journal (trace_context.hpp), so a replay, a
// restart or another host never sends a span twice.

#include <cstdint>
#include <vector>

#include "engine.hpp"
#include "otlp.hpp"
#include "store.hpp"

namespace durable::detail {

/// The spans that `entries` and `write` (either may be null) finish for `run`, written at
/// `now_ms`.
std::vector<ops::otlp::Span> finished_spans(const RunState& run,
                                            const std::vector<EntryWrite>* entries,
                                            const RunWrite* write, std::int64_t now_ms,
                                            bool quote_errors);

}  // namespace durable::detail
