// SPDX-License-Identifier: Apache-2.0
#include "engine.hpp"

#include <thread>
#include <utility>

#include "attempt.hpp"
#include "body_scope.hpp"
#include "durations.hpp"
#include "errors_internal.hpp"
#include "ids.hpp"
#include "retry.hpp"
#include "serialization.hpp"
#include "trace_context.hpp"

namespace durable::detail {

std::string Host::new_id() { return env().new_id(); }

namespace {

constexpr std::string_view kSwallowed =
    "the workflow caught durable's own unwinding and did not rethrow it: a catch (...) in "
    "workflow code swallowed it. Catch std::exception (or durable::StepFailed) instead, or "
    "rethrow with `throw;` inside catch (...)";

}  // namespace

// Wake times in history reasons, to the millisecond: the time the run is due, not a rounding.
std::string format_time(std::int64_t ms) { return utc_text(ms, true); }

Invocation::Invocation(RunState& run, const Workflow& workflow, const EngineConfig& config,
                       std::int64_t now_ms, std::mt19937_64& random, Host& host)
    : run_(&run),
      workflow_(&workflow),
      config_(&config),
      now_ms_(now_ms),
      host_(&host),
      step_(*this),
      cursor_(run.journal),
      rules_(run, cursor_, config),
      results_(run, workflow, config, random, host),
      pending_({*this, host, run, config, results_, nested_mutex_}) {}

Invocation::~Invocation() = default;

std::string Invocation::step_label(std::string_view key) const {
  return detail::step_label(key, run_->id);
}

// The history reason of a run waiting out a step's backoff: "step 'call' of run … attempt 1 of 5
// failed (std::runtime_error: 503); next attempt at 2026-11-21T00:04:16.395Z".
std::string Invocation::retry_text(const JournalEntry& e, const StepOptions& opts) const {
  const std::string error = e.error ? reason_error(*e.error) : "no error recorded";
  return step_label(e.key) + " attempt " + std::to_string(e.attempts) + " of " +
         std::to_string(results_.policy_of(opts).max_attempts) + " failed (" + error +
         "); next attempt at " + format_time(*e.wake_at_ms);
}

std::string Invocation::reason_error(const ErrorInfo& e) const {
  if (!host_->reasons_quote_errors()) return error_said(e, false);
  // The first line, cut short: a reason is written once per attempt (show and the step's entry
  // keep the whole error).
  std::string message = e.message.substr(0, e.message.find('\n'));
  if (message.size() > 200) {
    std::size_t cut = 200;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
    message = message.substr(0, cut) + "...";
  }
  return e.type + ": " + message;
}

BodyScope* Invocation::scope() const {
  BodyScope* scope = BodyScope::current();
  return scope != nullptr && &scope->invocation() == this ? scope : nullptr;
}

Outcome Invocation::execute() {
  Outcome outcome;
  outcome.kind = Outcome::Kind::failed;
  try {
    json output = workflow_->invoke(step_, run_->input);
    rules_.check_end(&output);
    flush();  // started steps never awaited complete before the run does
    outcome.kind = Outcome::Kind::completed;
    outcome.output = std::move(output);
    outcome.reason = "the workflow returned";
  } catch (const Unwind&) {
    if (store_error_) std::rethrow_exception(store_error_);
    if (!ending_) bug("an invocation of run " + run_->id + " unwound with no outcome");
    if (!swallowed_) return final_outcome(std::move(*ending_));
  } catch (const StepFailed& e) {
    outcome.error = e.info;
  } catch (...) {
    outcome.error = describe(std::current_exception());
  }
  // The workflow turned the unwinding a failure of the store began into a return or another
  // exception: the invocation ends with the store's error all the same.
  if (store_error_) std::rethrow_exception(store_error_);
  // Handed over already (and swallowed by the workflow since): nothing of it is the runtime's
  // to write any more.
  if (ending_ && ending_->kind == Outcome::Kind::handed_over) return std::move(*ending_);
  if (ending_) {
    // Unwinding had begun and the workflow turned it into a return, another exception, or
    // another step call. What the ending steps did is kept; the run fails.
    outcome.kind = Outcome::Kind::failed;
    outcome.error = ErrorInfo{"durable::Error", with_id(errc::misuse, kSwallowed), {}, 0};
    outcome.entries = std::move(ending_->entries);
  }
  if (outcome.kind == Outcome::Kind::failed) {
    const ErrorInfo& e = *outcome.error;
    outcome.reason =
        e.step_id.empty()
            ? "the workflow threw " + reason_error(e)
            : "step '" + e.step_id +
                  "' failed for good and the workflow did not catch StepFailed: " + reason_error(e);
  }
  return final_outcome(std::move(outcome));
}

// Applies what the workflow could not override: a divergence fails the run, and steps that
// failed for good in this invocation are journaled with whatever the invocation ended in.
Outcome Invocation::final_outcome(Outcome outcome) {
  if (outcome.kind == Outcome::Kind::handed_over) return outcome;
  for (EntryWrite& failed : failed_) outcome.entries.push_back(std::move(failed));
  failed_.clear();
  if (const auto& diverged = rules_.diverged(); diverged && outcome.kind != Outcome::Kind::lost) {
    outcome.kind = Outcome::Kind::failed;
    outcome.error = diverged;
    outcome.reason = host_->reasons_quote_errors()
                         ? "the workflow diverged from its journal: " + diverged->message
                         : "the workflow diverged from its journal (the run's error says how)";
  }
  return outcome;
}

void Invocation::end(Outcome outcome) {
  ending_ = std::move(outcome);
  unwind();
}

// A database that failed (a dropped connection, a full disk) says nothing of the workflow: were
// its error thrown to the workflow as any other, the run would fail for good once the database
// is back. The invocation ends instead, and the run is taken up again from what the store holds.
void Invocation::store_failed(std::exception_ptr error) {
  store_error_ = std::move(error);
  unwind();
}

std::string Invocation::traceparent() const {
  trace::TraceParent context = trace::run_context(run_->id, run_->traceparent);
  if (const Attempt* attempt = Attempt::current(); attempt != nullptr && attempt->host() == host_) {
    context.span_id = trace::step_span(run_->id, attempt->key(), attempt->number());
  }
  return trace::format_traceparent(context);
}

void Invocation::before_step_call() {
  if (store_error_) throw Unwind{};  // the workflow swallowed the unwinding and went on
  if (ending_) {  // the workflow swallowed the unwinding and carried on to another step
    swallowed_ = true;
    throw Unwind{};
  }
  if (const auto& diverged = rules_.diverged()) throw NonDeterminism(diverged->message);
  if (!failed_.empty()) {
    if (config_->resident) {  // journal the failures and go on in place
      journal_in_place(failed_);
      failed_.clear();
      return;
    }
    // The workflow caught StepFailed and went on: journal the failures first, run this step
    // in the next invocation.
    Outcome failure;
    failure.kind = Outcome::Kind::step_done;
    failure.reason = "step '" + failed_.front().entry.key +
                     "' failed for good; the workflow "
                     "caught StepFailed and goes on";
    failure.entries = std::move(failed_);
    failed_.clear();
    end(std::move(failure));
  }
}

const json* Invocation::begin_run(std::string_view id, const StepOptions& opts) {
  if (BodyScope* nested = scope()) return nested->begin_run(id, opts);
  before_step_call();
  ReplayCursor::Match match = cursor_.next(id);
  JournalEntry* entry = match.entry;
  if (entry != nullptr && entry->kind != StepKind::run) rules_.diverge(*entry, "step.run");
  if (entry != nullptr && entry->state == StepState::completed) {
    last_key_ = entry->key;
    return &entry->output;
  }
  if (entry != nullptr && entry->state == StepState::failed) {
    throw StepFailed(entry->error.value_or(ErrorInfo{"unknown", "", entry->key, entry->attempts}));
  }
  if (entry == nullptr) check_step_id(id);
  rules_.note_new(entry != nullptr ? std::string_view(entry->key) : match.key, "step.run", entry);
  // New, or due for another attempt: its body runs at the wait point run_new() makes.
  add_pending(std::move(match), std::string(id), opts, {}, entry);
  return nullptr;
}

const json* Invocation::run_new(Body body) {
  if (BodyScope* nested = scope()) return &nested->run_new(std::move(body));
  PendingStep& pending = pending_.back();
  pending.body = std::move(body);
  return await(pending.slot);
}

std::size_t Invocation::start_step(std::string_view id, const StepOptions& opts, Body body,
                                   std::optional<std::size_t> item) {
  if (BodyScope* nested = scope()) return nested->start_step(id, opts, std::move(body), item);
  before_step_call();
  check_step_id(id);
  std::string base(id);
  if (item) base += "[" + std::to_string(*item) + "]";
  ReplayCursor::Match match = item ? cursor_.next_internal(base) : cursor_.next(id);
  JournalEntry* entry = match.entry;
  if (entry != nullptr && entry->kind != StepKind::run) rules_.diverge(*entry, "step.start");
  if (entry != nullptr &&
      (entry->state == StepState::completed || entry->state == StepState::failed)) {
    slots_.push_back(Slot{entry, {}});
    return slots_.size() - 1;
  }
  rules_.note_new(entry != nullptr ? std::string_view(entry->key) : match.key,
                  item ? "step.map" : "step.start", entry);
  return add_pending(std::move(match), std::move(base), opts, std::move(body), entry);
}

std::size_t Invocation::add_pending(ReplayCursor::Match match, std::string base,
                                    const StepOptions& opts, Body body, JournalEntry* retrying) {
  PendingStep& p = pending_.add();
  p.key = retrying != nullptr ? retrying->key : std::move(match.key);
  p.base = std::move(base);
  p.options = opts;
  p.body = std::move(body);
  if (retrying != nullptr) {
    p.attempt = retrying->attempts + 1;
    p.is_new = false;
    p.due_ms = retrying->wake_at_ms.value_or(0);
  }
  check_step_options(opts, step_label(p.key));
  p.slot = slots_.size();
  slots_.push_back(Slot{nullptr, {}});
  return p.slot;
}

bool Invocation::ready(std::size_t slot) const {
  if (BodyScope* nested = scope()) return nested->ready(slot);
  const Slot& s = slots_.at(slot);
  return s.entry != nullptr || s.failure.has_value();
}

const json* Invocation::await(std::size_t slot) {
  if (BodyScope* nested = scope()) return &nested->await(slot);
  if (!ready(slot) && !settle()) return nullptr;
  const Slot& s = slots_.at(slot);
  if (s.failure) throw StepFailed(*s.failure);
  if (s.entry == nullptr) bug("step slot " + std::to_string(slot) + " is empty after its wait");
  if (s.entry->state == StepState::failed) {
    throw StepFailed(s.entry->error.value_or(ErrorInfo{"unknown", "", s.entry->key, 0}));
  }
  last_key_ = s.entry->key;
  return &s.entry->output;
}

// A wait point: every pending body that is due runs now, concurrently. Whatever completed or
// must be retried is journaled. Under every_step that ends the invocation (false, ending_ set);
// resident (under on_recovery) the workflow goes on in place, after waiting out a short backoff.
// Steps that only failed for good are held, so that StepFailed reaches the workflow in this
// invocation.
bool Invocation::settle() {
  rules_.check_parallel();  // no body runs before its new siblings are known to be in order
  while (!pending_.empty()) {
    const PendingSteps::Ran ran = pending_.run_due(now_ms_);
    if (ran.write_error) store_failed(ran.write_error);
    // Entries the step threads journaled are this invocation's own from here on: the calls after
    // them (a failure caught, the same id used again) number past them.
    if (ran.written) cursor_.absorb_appended();
    PendingSteps::Round round = pending_.fold();
    for (auto& [slot, failure] : round.failures) slots_[slot].failure = std::move(failure);
    for (EntryWrite& f : round.failed) failed_.push_back(std::move(f));
    // A body abandoned at its timeout still runs on frames this invocation must keep: whatever
    // it ends in is handed over before it unwinds (and nothing goes on in place).
    const bool abandoned = pending_.any_abandoned();
    if (round.lost) {
      Outcome gone{Outcome::Kind::lost, {}, {}, {}, 0, "a nested step's write was refused", {}};
      if (abandoned) return hand_over(std::move(gone));
      end(std::move(gone));
    }
    // Only failures: StepFailed reaches the workflow now.
    if (!round.journaled && !round.wake && !abandoned) return true;
    Outcome outcome = outcome_of(round);
    if (abandoned) return hand_over(std::move(outcome));
    if (!stays_resident(outcome)) {
      ending_ = std::move(outcome);
      return false;
    }
    journal_in_place(outcome.entries);
    for (const auto& [slot, key] : round.completed) slots_[slot].entry = run_->journal.find(key);
    if (round.wake) park_in_place(*round.wake);
    pending_.go_again(std::move(round.again));
  }
  return true;
}

// The round's outcome, with the failures for good held so far, as its history says it: a sleep
// until the next attempt, or what was journaled.
Outcome Invocation::outcome_of(PendingSteps::Round& round) {
  Outcome outcome{Outcome::Kind::step_done, std::move(round.entries), {}, {}, 0, {}, {}};
  for (EntryWrite& f : failed_) outcome.entries.push_back(std::move(f));
  failed_.clear();
  if (round.wake) {
    outcome.kind = Outcome::Kind::sleep;
    outcome.wake_at_ms = *round.wake;
    outcome.reason = round.retry && round.retry->wake_at_ms == round.wake
                         ? retry_text(*round.retry, round.retry_options)
                         : "waiting for a step's next attempt at " + format_time(*round.wake);
    return outcome;
  }
  const auto one = [this](const JournalEntry& e) {
    return step_label(e.key) + (e.state == StepState::failed ? " failed for good" : " completed");
  };
  outcome.reason = outcome.entries.size() == 1
                       ? one(outcome.entries.front().entry)
                       : std::to_string(outcome.entries.size()) + " parallel steps journaled";
  return outcome;
}

bool Invocation::hand_over(Outcome outcome) {
  Outcome final = final_outcome(std::move(outcome));
  std::exception_ptr error;
  try {
    host_->carry_out(decide::HandOver{final});
  } catch (...) {
    error = std::current_exception();  // rethrown once out of the handler: linger() may switch
  }                                    // fibers, which a handler must not span
  pending_.linger();
  if (error) std::rethrow_exception(error);
  ending_ = Outcome{Outcome::Kind::handed_over, {}, {}, {}, 0, std::move(final.reason), {}};
  return false;
}

bool Invocation::stays_resident(const Outcome& outcome) const {
  if (!config_->resident) return false;
  if (outcome.kind == Outcome::Kind::step_done) return true;
  return outcome.kind == Outcome::Kind::sleep &&
         outcome.wake_at_ms - now_ms_ <= config_->resident_sleep_ms;
}

// Resident: the host journals the entries now (and adds them to the run's journal); the cursor
// counts them as this invocation's own from here on.
void Invocation::journal_in_place(std::vector<EntryWrite>& entries) {
  bool kept = false;
  try {
    kept = host_->carry_out(decide::Journal{entries}).kept;
  } catch (...) {
    store_failed(std::current_exception());
  }
  if (!kept) {
    end(Outcome{Outcome::Kind::lost, {}, {}, {}, 0, "the run was cancelled or taken over", {}});
  }
  cursor_.absorb_appended();
}

Outcome Invocation::evicted(std::int64_t wake_ms) const {
  Outcome outcome;
  outcome.kind = Outcome::Kind::sleep;
  outcome.wake_at_ms = wake_ms;
  outcome.reason = "evicted until " + format_time(wake_ms);
  return outcome;
}

void Invocation::bad_conversion(const json& value, std::string_view type,
                                const std::exception& error) {
  host_->result_not_converted(std::string(last_key_), value, type, error);
  throw Error(errc::type_mismatch,
              step_label(last_key_) + ": the journaled result " + shortened_dump(value) +
                  " (JSON " + value.type_name() + ") does not convert to the step's type " +
                  std::string(type) + ": " + error.what() +
                  ". Convert the old form in from_json, or give the changed step a new id");
}

}  // namespace durable::detail
