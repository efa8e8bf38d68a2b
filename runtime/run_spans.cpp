// SPDX-License-Identifier: Apache-2.0
#include "run_spans.hpp"

#include <map>

#include "errors_internal.hpp"
#include "lifecycle.hpp"
#include "trace_context.hpp"

namespace durable::detail {

namespace {

using ops::otlp::Span;

constexpr std::int64_t kNsPerMs = 1'000'000;

// A text field of an entry's output object, or "".
std::string output_field(const JournalEntry& e, const char* name) {
  if (!e.output.is_object()) return {};
  const auto it = e.output.find(name);
  return it != e.output.end() && it->is_string() ? it->get<std::string>() : std::string();
}

class SpanMaker {
 public:
  bool sampled() const { return (context_.flags & 1) != 0; }
  SpanMaker(const RunState& run, bool quote_errors)
      : run_(run),
        context_(trace::run_context(run.id, run.traceparent)),
        quote_errors_(quote_errors) {}

  // The run's own span, when a write ends it.
  Span of_run(const RunWrite& write) const {
    Span span = base("run " + run_.workflow, context_.span_id);
    if (const auto joined = trace::parse_traceparent(run_.traceparent))
      span.parent = joined->span_id;
    span.start_unix_ns = (run_.created_at_ms > 0 ? run_.created_at_ms : write.now_ms) * kNsPerMs;
    span.end_unix_ns = write.now_ms * kNsPerMs;
    span.attributes.emplace_back("durable.run.status", std::string(to_string(*write.status)));
    span.attributes.emplace_back("durable.run.invocations", write.invocations);
    if (write.status == Status::failed && write.error) {
      span.error = true;
      span.error_message = error_said(*write.error, quote_errors_);
    }
    if (write.successor)
      span.attributes.emplace_back("durable.run.continued_as", write.successor->id);
    return span;
  }

  // One attempt of a step body, as its entry was journaled at the attempt's end.
  Span of_attempt(const JournalEntry& e, int outer_attempt, std::int64_t now_ms) const {
    // A nested step's base is its path ("outer/inner"); the span says the id its code wrote.
    const std::string_view id = std::string_view(e.base).substr(e.base.rfind('/') + 1);
    Span span = base("step " + std::string(id), trace::step_span(run_.id, e.key, e.attempts));
    span.parent = context_.span_id;
    // A nested step's span goes under the attempt of the body it is nested in.
    if (const std::size_t slash = e.key.rfind('/');
        slash != std::string::npos && outer_attempt > 0) {
      span.parent =
          trace::step_span(run_.id, std::string_view(e.key).substr(0, slash), outer_attempt);
    }
    const std::int64_t start = e.started_at_ms.value_or(now_ms);
    span.start_unix_ns = start * kNsPerMs;
    span.end_unix_ns = (start + e.duration_ms.value_or(0)) * kNsPerMs;
    step_attributes(span, e);
    span.attributes.emplace_back("durable.step.attempt", e.attempts);
    span.attributes.emplace_back("durable.step.status", std::string(to_string(e.state)));
    if (e.state != StepState::completed && e.error) {
      span.error = true;
      span.error_message = error_said(*e.error, quote_errors_);
    }
    return span;
  }

  // A sleep, an event wait or a child run the run made: from when the run came to it to when it
  // was over (as the store wrote it), or to now when it was not.
  Span of_wait(const JournalEntry& e, std::int64_t now_ms) const {
    const char* what = e.kind == StepKind::sleep   ? "sleep "
                       : e.kind == StepKind::event ? "wait "
                                                   : "invoke ";
    Span span = base(what + e.base, trace::step_span(run_.id, e.key, 1));
    span.parent = context_.span_id;
    const std::int64_t start = *e.started_at_ms;
    // Its end as the store wrote it; one over in the commit that wrote it (a zero timeout, a
    // sleep already past) ended where it began; a resident sleep over in place, at its wake.
    std::int64_t end = start;
    if (e.updated_at_ms > start) {
      end = e.updated_at_ms;
    } else if (e.kind == StepKind::sleep && e.wake_at_ms) {
      end = std::min(now_ms, *e.wake_at_ms);
    } else if (e.state == StepState::waiting || e.state == StepState::sleeping) {
      end = now_ms;  // not over: the run ended without it (cancelled meanwhile)
    }
    span.start_unix_ns = start * kNsPerMs;
    span.end_unix_ns = std::max(start, end) * kNsPerMs;
    step_attributes(span, e);
    span.attributes.emplace_back("durable.step.status", std::string(to_string(e.state)));
    if (e.kind == StepKind::event && e.state == StepState::completed) {
      span.attributes.emplace_back("durable.wait.timed_out", e.output.is_null());
    }
    if (e.kind == StepKind::invoke) {
      span.attributes.emplace_back("durable.child.run_id", output_field(e, "run"));
      span.attributes.emplace_back("durable.child.workflow", output_field(e, "workflow"));
      if (e.state == StepState::failed && e.error) {
        span.error = true;
        span.error_message = error_said(*e.error, quote_errors_);
      }
    }
    return span;
  }

 private:
  Span base(std::string name, const trace::SpanId& id) const {
    Span span;
    span.trace_id = context_.trace_id;
    span.span_id = id;
    span.name = std::move(name);
    span.attributes = {{"durable.run_id", run_.id},
                       {"durable.correlation_id", run_.correlation_id},
                       {"durable.workflow", run_.workflow}};
    return span;
  }
  static void step_attributes(Span& span, const JournalEntry& e) {
    span.attributes.emplace_back("durable.step.key", e.key);
    span.attributes.emplace_back("durable.step.id", e.base);
  }

  const RunState& run_;
  trace::TraceParent context_;
  bool quote_errors_;
};

bool attempt_ended(const JournalEntry& e) {
  return e.kind == StepKind::run && e.resolved.empty() && e.attempts > 0 &&
         (e.state == StepState::completed || e.state == StepState::retrying ||
          e.state == StepState::failed);
}

bool waited(const JournalEntry& e) {
  return (e.kind == StepKind::sleep || e.kind == StepKind::event || e.kind == StepKind::invoke) &&
         e.started_at_ms.has_value() && !e.nested;
}

}  // namespace

std::vector<ops::otlp::Span> finished_spans(const RunState& run,
                                            const std::vector<EntryWrite>* entries,
                                            const RunWrite* write, std::int64_t now_ms,
                                            bool quote_errors) {
  std::vector<Span> spans;
  const SpanMaker make(run, quote_errors);
  if (!make.sampled()) return spans;  // the caller's traceparent said not to record
  if (entries != nullptr) {
    for (const EntryWrite& w : *entries) {
      if (attempt_ended(w.entry))
        spans.push_back(make.of_attempt(w.entry, w.outer_attempt, now_ms));
    }
  }
  if (write == nullptr || !write->status || !ended(*write->status)) return spans;
  // The run's journal, with what this write adds or changes in it.
  std::map<std::string_view, const JournalEntry*> last;
  for (const JournalEntry& e : run.journal.entries()) last[e.key] = &e;
  if (entries != nullptr) {
    for (const EntryWrite& w : *entries) last[w.entry.key] = &w.entry;
  }
  for (const auto& [key, e] : last) {
    if (waited(*e)) spans.push_back(make.of_wait(*e, now_ms));
  }
  spans.push_back(make.of_run(*write));
  return spans;
}

}  // namespace durable::detail
