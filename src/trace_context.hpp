// SPDX-License-Identifier: Apache-2.0
#pragma once
// W3C trace context for runs (issue 18): a run's trace id and the span ids of its run, step
// attempts, sleeps and waits. Span ids are derived from what the journal holds (the run id, the
// step key, the attempt), never drawn at random, so that a replay, a restart or another host
// names the same span again instead of emitting a duplicate. Pure functions; no I/O.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace durable::detail::trace {

using TraceId = std::array<std::uint8_t, 16>;
using SpanId = std::array<std::uint8_t, 8>;

/// One `traceparent` header: version 00, a trace id, the parent span id, the flags.
struct TraceParent {
  TraceId trace_id{};
  SpanId span_id{};
  std::uint8_t flags = 0;  ///< bit 0: sampled
};

/// Parses a `traceparent` header as W3C Trace Context level 1 says: "00-<32 hex>-<16 hex>-<2
/// hex>", lowercase; ids not all zero; version ff refused; a later version read by its first
/// four fields. nullopt for anything else (a receiver then starts a new trace).
std::optional<TraceParent> parse_traceparent(std::string_view header);

/// The header text of `parent`, version 00.
std::string format_traceparent(const TraceParent& parent);

/// The trace id of a run started without a traceparent: derived from its id, so every worker
/// that touches the run names the same trace.
TraceId trace_id_of_run(std::string_view run_id);

/// The span of the run as a whole.
SpanId run_span(std::string_view run_id);
/// The span of one attempt of a step (a step.run body, a transaction), or of a sleep or wait
/// (attempt 1): derived from the run id, the step's journal key and the attempt.
SpanId step_span(std::string_view run_id, std::string_view step_key, int attempt);

/// A run's own context: its trace (that of the traceparent it joins, or the one derived from its
/// id when it joins none or an unreadable one), the run's span, and the flags it joined with
/// (sampled when it joined none).
TraceParent run_context(std::string_view run_id, std::string_view joined);

/// Lowercase hex of an id.
std::string hex(const TraceId& id);
std::string hex(const SpanId& id);

}  // namespace durable::detail::trace
