// SPDX-License-Identifier: Apache-2.0
// The step tools that wait, or reach outside the run: step.sleep, step.wait_for_event,
// step.receive, step.send_event and step.invoke. Each journals one entry, where a wait or a child's
// span begins (started_at), and ends the invocation while the run waits, unless it is resident and
// the wait is short.

#include "body_scope.hpp"
#include "engine.hpp"
#include "ids.hpp"
#include "run_requests.hpp"
#include "serialization.hpp"

namespace durable::detail {

void Invocation::sleep_until(std::string_view id, std::int64_t wake_at_ms) {
  if (BodyScope* nested = scope()) nested->refuse("step.sleep", id);
  before_step_call();
  ReplayCursor::Match match = cursor_.next(id);
  JournalEntry* entry = match.entry;
  if (entry != nullptr && entry->kind != StepKind::sleep) rules_.diverge(*entry, "step.sleep");
  flush();  // started steps complete before the run sleeps
  if (entry == nullptr) {
    check_step_id(id);
    rules_.note_new(match.key, "step.sleep", nullptr);
    JournalEntry sleep;
    sleep.key = std::move(match.key);
    sleep.base = std::string(id);
    sleep.kind = StepKind::sleep;
    sleep.wake_at_ms = wake_at_ms;
    sleep.invocation = run_->invocations + 1;
    sleep.started_at_ms = now_ms_;
    Outcome outcome;
    if (wake_at_ms <= now_ms_) {
      sleep.state = StepState::completed;
      outcome.kind = Outcome::Kind::step_done;
      outcome.reason = step_label(sleep.key) + ": sleep already over";
    } else {
      sleep.state = StepState::sleeping;
      outcome.kind = Outcome::Kind::sleep;
      outcome.wake_at_ms = wake_at_ms;
      outcome.reason = "sleep '" + sleep.key + "' until " + format_time(wake_at_ms);
    }
    outcome.entries.push_back({std::move(sleep), true});
    if (!stays_resident(outcome)) end(std::move(outcome));
    JournalEntry slept = outcome.entries.front().entry;
    journal_in_place(outcome.entries);
    if (outcome.kind == Outcome::Kind::sleep) {
      park_in_place(wake_at_ms);
      slept.state = StepState::completed;  // over, as a replay would now see it
      std::vector<EntryWrite> over{{std::move(slept), false}};
      journal_in_place(over);
    }
    return;
  }
  if (entry->state == StepState::completed) return;
  const std::int64_t wake = entry->wake_at_ms.value_or(0);
  if (wake <= now_ms_) return;
  Outcome outcome;
  outcome.kind = Outcome::Kind::sleep;
  outcome.wake_at_ms = wake;
  outcome.reason = "sleep '" + entry->key + "' until " + format_time(wake);
  if (!stays_resident(outcome)) end(std::move(outcome));
  park_in_place(wake);
}

// Resident: waits out a short sleep or backoff here, or, if the clock did not get there, ends
// the invocation so the run replays when it does.
void Invocation::park_in_place(std::int64_t wake_ms) {
  now_ms_ = host_->carry_out(decide::Park{wake_ms}).now_ms;
  if (now_ms_ < wake_ms) end(evicted(wake_ms));
}

JournalEntry* Invocation::begin_special(std::string_view id, StepKind kind, std::string_view tool,
                                        ReplayCursor::Match& match) {
  if (BodyScope* nested = scope()) nested->refuse(tool, id);
  before_step_call();
  match = cursor_.next(id);
  return begin_at(match, kind, tool, [id] { check_step_id(id); });
}

JournalEntry* Invocation::begin_internal(std::string_view base, StepKind kind,
                                         std::string_view tool, ReplayCursor::Match& match,
                                         const std::function<void()>& refuse_new) {
  before_step_call();
  match = cursor_.next_internal(base);
  return begin_at(match, kind, tool, refuse_new);
}

// What begin_special and begin_internal share once the cursor has matched the call.
JournalEntry* Invocation::begin_at(ReplayCursor::Match& match, StepKind kind,
                                   std::string_view tool, const std::function<void()>& refuse_new) {
  JournalEntry* entry = match.entry;
  if (entry != nullptr && entry->kind != kind) rules_.diverge(*entry, tool);
  if (entry == nullptr) {
    if (refuse_new) refuse_new();
    rules_.note_new(match.key, tool, nullptr);
  }
  flush();  // started steps complete before it, as before any step
  return entry;
}

JournalEntry Invocation::new_entry(ReplayCursor::Match& match, std::string_view id,
                                   StepKind kind) const {
  JournalEntry entry;
  entry.key = std::move(match.key);
  entry.base = std::string(id);
  entry.kind = kind;
  entry.invocation = run_->invocations + 1;
  // Where a wait's, child's or send's span begins (not a journaled value's or a patch marker's).
  if (kind == StepKind::event || kind == StepKind::invoke || kind == StepKind::send ||
      kind == StepKind::receive) {
    entry.started_at_ms = now_ms_;
  }
  return entry;
}

// Ends the invocation with the run waiting on `entry` (an event or a child run): the store
// wakes it when that comes, or when the entry's timeout passes. Resident invocations end too.
void Invocation::wait_on(const JournalEntry& entry, std::string reason,
                         std::optional<EntryWrite> write) {
  Outcome outcome;
  outcome.kind = Outcome::Kind::wait;
  outcome.wake_at_ms = entry.wake_at_ms.value_or(kNever);
  outcome.reason = std::move(reason);
  if (write) outcome.entries.push_back(std::move(*write));
  end(std::move(outcome));
}

std::optional<json> Invocation::wait_for_event(std::string_view id, std::string_view event,
                                               const WaitOptions& opts) {
  ReplayCursor::Match match;
  JournalEntry* entry = begin_special(id, StepKind::event, "step.wait_for_event", match);
  if (entry == nullptr) {
    if (event.empty())
      throw Error(errc::invalid_argument,
                  "step.wait_for_event('" + std::string(id) + "') needs a name");
    check_utf8(event, "the event name of step.wait_for_event('" + std::string(id) + "')");
    if (opts.timeout.count() < 0) {
      throw Error(errc::invalid_argument,
                  "step.wait_for_event('" + std::string(id) + "'): the timeout is negative");
    }
    if (!opts.match.is_object()) {
      throw Error(errc::invalid_argument,
                  "step.wait_for_event('" + std::string(id) +
                      "'): match must be a JSON object of the fields to compare, not " +
                      lenient_dump(opts.match));
    }
    storable_text(opts.match, "the match of step.wait_for_event('" + std::string(id) + "')",
                  SIZE_MAX);
    JournalEntry wait = new_entry(match, id, StepKind::event);
    // Only events stored after this point count; the store checks the ones that came between
    // here and the commit of this wait, so an event racing with it is not lost.
    std::int64_t since = 0;
    try {
      since = host_->event_horizon();
    } catch (...) {
      store_failed(std::current_exception());
    }
    wait.output = {{"event", event}, {"match", opts.match}, {"since", since}};
    if (opts.timeout != std::chrono::milliseconds::max()) {
      wait.wake_at_ms = now_ms_ + std::min<std::int64_t>(opts.timeout.count(), kNever - now_ms_);
    }
    if (wait.wake_at_ms && *wait.wake_at_ms <= now_ms_) {  // a zero timeout: over already
      wait.state = StepState::completed;
      wait.output = nullptr;
      Outcome outcome;
      outcome.kind = Outcome::Kind::step_done;
      outcome.reason = step_label(wait.key) + ": timed out at once (zero timeout)";
      outcome.entries.push_back({std::move(wait), true});
      if (!stays_resident(outcome)) end(std::move(outcome));
      journal_in_place(outcome.entries);
      return std::nullopt;
    }
    wait.state = StepState::waiting;
    const std::string reason = "waiting for event '" + std::string(event) + "' (" + wait.key + ")";
    wait_on(wait, reason, EntryWrite{std::move(wait), true});
  }
  if (entry->state == StepState::waiting) {
    wait_on(*entry, "still waiting for event (" + entry->key + ")", std::nullopt);
  }
  if (entry->output.is_null()) return std::nullopt;  // timed out
  return entry->output.value("data", json());
}

void Invocation::journal_completed(JournalEntry entry, std::string reason) {
  entry.state = StepState::completed;
  Outcome outcome;
  outcome.kind = Outcome::Kind::step_done;
  outcome.reason = std::move(reason);
  outcome.entries.push_back({std::move(entry), true});
  // Journaled before the code goes on: what follows (a body's effect) may depend on it.
  if (!stays_resident(outcome)) end(std::move(outcome));
  journal_in_place(outcome.entries);
}

void Invocation::send_event(std::string_view id, std::string_view event, json data) {
  ReplayCursor::Match match;
  if (begin_special(id, StepKind::send, "step.send_event", match) != nullptr) return;  // sent
  if (event.empty())
    throw Error(errc::invalid_argument, "step.send_event('" + std::string(id) + "') needs a name");
  check_utf8(event, "the event name of step.send_event('" + std::string(id) + "')");
  storable_text(data, "the data of step.send_event('" + std::string(id) + "')",
                config_->max_output_bytes);
  JournalEntry send = new_entry(match, id, StepKind::send);
  // The store publishes the event in the transaction that journals this entry: exactly once.
  send.output = {
      {"id", host_->new_id()}, {"name", event}, {"data", std::move(data)}, {"time", now_ms_}};
  std::string reason = step_label(send.key) + " sent event '" + std::string(event) + "'";
  journal_completed(std::move(send), std::move(reason));
}

// Unlike a wait_for_event, a receive always waits, even with a zero timeout: the store looks in
// the mailbox when it journals the wait, and takes the oldest message there in that transaction
// (so the run goes on at once); else a send completes the wait in its own transaction, or the
// timeout does, whichever comes first.
std::optional<json> Invocation::receive(std::string_view id, std::string_view topic,
                                        std::chrono::milliseconds timeout) {
  ReplayCursor::Match match;
  JournalEntry* entry = begin_special(id, StepKind::receive, "step.receive", match);
  if (entry == nullptr) {
    const std::string what = "step.receive('" + std::string(id) + "')";
    check_topic(topic, "the topic of " + what);
    if (timeout.count() < 0)
      throw Error(errc::invalid_argument, what + ": the timeout is negative");
    JournalEntry wait = new_entry(match, id, StepKind::receive);
    wait.output = {{"topic", topic}};
    if (timeout != std::chrono::milliseconds::max()) {
      wait.wake_at_ms = now_ms_ + std::min<std::int64_t>(timeout.count(), kNever - now_ms_);
    }
    wait.state = StepState::waiting;
    const std::string reason =
        "waiting for a message on '" + std::string(topic) + "' (" + wait.key + ")";
    wait_on(wait, reason, EntryWrite{std::move(wait), true});
  }
  if (entry->state == StepState::waiting) {
    wait_on(*entry, "still waiting for a message (" + entry->key + ")", std::nullopt);
  }
  if (entry->output.is_null()) return std::nullopt;  // timed out
  return entry->output.value("message", json());
}

json Invocation::invoke(std::string_view id, std::string_view workflow, json input) {
  ReplayCursor::Match match;
  JournalEntry* entry = begin_special(id, StepKind::invoke, "step.invoke", match);
  // New, or retried (Runtime::retry of a run whose child failed): a new child run.
  if (entry == nullptr || entry->state == StepState::retrying) {
    storable_text(input, "the input of step.invoke('" + std::string(id) + "')",
                  config_->max_output_bytes);
    host_->check_child(workflow, input);
    const bool is_new = entry == nullptr;
    if (!is_new) {
      match.key = entry->key;
      rules_.note_new(entry->key, "step.invoke", entry);
    }
    JournalEntry call = new_entry(match, id, StepKind::invoke);
    call.state = StepState::waiting;
    call.attempts = is_new ? 1 : entry->attempts + 1;
    // The store creates the child in the transaction that journals this entry: exactly once.
    const std::string child = host_->new_id();
    call.output = {{"run", child}, {"workflow", workflow}, {"input", std::move(input)}};
    wait_on(call, "waiting for child run " + child + " of '" + std::string(workflow) + "'",
            EntryWrite{std::move(call), is_new});
  }
  switch (entry->state) {
    case StepState::waiting:
      wait_on(*entry, "still waiting for child run " + entry->output.value("run", ""),
              std::nullopt);
    case StepState::failed:
      throw StepFailed(entry->error.value_or(ErrorInfo{"unknown", "", entry->key, 1}));
    default:
      last_key_ = entry->key;
      return entry->output.value("output", json());
  }
}

}  // namespace durable::detail
