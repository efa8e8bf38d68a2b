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
      random_(&random),
      host_(&host),
      step_(*this),
      cursor_(run.journal) {}

Invocation::~Invocation() = default;

std::string Invocation::step_label(std::string_view key) const {
  return "step '" + std::string(key) + "' of run " + run_->id;
}

// The history reason of a run waiting out a step's backoff: "step 'call' of run … attempt 1 of 5
// failed (std::runtime_error: 503); next attempt at 2026-11-21T00:04:16.395Z".
std::string Invocation::retry_text(const JournalEntry& e, const StepOptions& opts) const {
  const std::string error = e.error ? reason_error(*e.error) : "no error recorded";
  return step_label(e.key) + " attempt " + std::to_string(e.attempts) + " of " +
         std::to_string(policy_of(opts).max_attempts) + " failed (" + error +
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
    check_strict_end(&output);
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
  if (diverged_ && outcome.kind != Outcome::Kind::lost) {
    outcome.kind = Outcome::Kind::failed;
    outcome.error = diverged_;
    outcome.reason = host_->reasons_quote_errors()
                         ? "the workflow diverged from its journal: " + diverged_->message
                         : "the workflow diverged from its journal (the run's error says how)";
  }
  return outcome;
}

void Invocation::note_new(std::string_view key, std::string_view tool,
                          const JournalEntry* retrying) {
  if (retrying == nullptr) refuse_patch_id(key, tool);
  // Nothing unmet now: nothing can be later, as calls only meet entries.
  if (retrying == nullptr && config_->strict && cursor_.went_past()) {
    NewCall call{std::string(key), std::string(tool), call_site(), nullptr};
    if (tool != "step.start" && tool != "step.map") {
      check_strict(call);
    } else if (!parallel_new_) {
      parallel_new_ = std::move(call);
    }
  }
  if (!config_->replay_only || first_new_) return;
  first_new_ = NewCall{std::string(key), std::string(tool), call_site(), retrying};
}

void Invocation::check_strict(const NewCall& call) {
  const JournalEntry* missed = cursor_.first_unmet();
  if (missed == nullptr) return;
  diverge_strictly(*missed, "the code now calls " + call.tool + "('" + call.key + "')" +
                                (call.site.empty() ? "" : " (at " + call.site + ")") +
                                ", which the journal of run " + run_->id +
                                " does not hold, where the journal holds step '" + missed->key +
                                "', " + describe(*missed) + ", which no call met before it");
}

void Invocation::check_strict_end(const json* output) {
  if (!config_->strict) return;
  const JournalEntry* missed = cursor_.first_unmet();
  if (missed == nullptr) return;
  const std::string ends = output != nullptr ? "returned " + shortened_dump(*output)
                                             : "continues as a new run (step.continue_as_new)";
  diverge_strictly(*missed, "the workflow now " + ends + " without calling step '" + missed->key +
                                "', " + describe(*missed) + ", which the journal of run " +
                                run_->id + " holds");
}

void Invocation::diverge_strictly(const JournalEntry& missed, std::string what) {
  diverge_with(NonDeterminism(std::move(what) +
                              " (strict replay: the code no longer makes the calls this run "
                              "made). Restore the code the run began on, or put the change "
                              "behind step.patched(); retry() resumes the run once fixed"),
               missed.key);
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
  if (diverged_) throw NonDeterminism(diverged_->message);
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

void Invocation::diverge(const JournalEntry& entry, std::string_view tool) {
  if (entry.kind == StepKind::patch) patch_id_taken(entry.key, tool);  // a step with its id
  diverge_with(NonDeterminism(step_label(entry.key) + " was journaled as " + describe(entry) +
                              ", but the code now calls " + std::string(tool) + " with that id" +
                              at_call_site() +
                              ". Give the new step another id, or restore the old code; retry() "
                              "resumes the run once fixed"),
               entry.key);
}

// The run met NonDeterminism: it fails whatever the code does next, with this error as thrown
// (its message with its id).
void Invocation::diverge_with(const NonDeterminism& error, std::string key) {
  diverged_site_ = call_site();
  diverged_ = ErrorInfo{"durable::NonDeterminism", error.what(), std::move(key), 0};
  throw error;
}

const RetryPolicy& Invocation::policy_of(const StepOptions& opts) const {
  static const RetryPolicy kDefault{};
  if (opts.retry) return *opts.retry;
  if (workflow_->options().retry) return *workflow_->options().retry;
  return kDefault;
}

const json* Invocation::begin_run(std::string_view id, const StepOptions& opts) {
  if (BodyScope* nested = scope()) return nested->begin_run(id, opts);
  before_step_call();
  ReplayCursor::Match match = cursor_.next(id);
  JournalEntry* entry = match.entry;
  if (entry != nullptr && entry->kind != StepKind::run) diverge(*entry, "step.run");
  if (entry != nullptr && entry->state == StepState::completed) {
    last_key_ = entry->key;
    return &entry->output;
  }
  if (entry != nullptr && entry->state == StepState::failed) {
    throw StepFailed(entry->error.value_or(ErrorInfo{"unknown", "", entry->key, entry->attempts}));
  }
  if (entry == nullptr) check_step_id(id);
  note_new(entry != nullptr ? std::string_view(entry->key) : match.key, "step.run", entry);
  // New, or due for another attempt: its body runs at the wait point run_new() makes.
  add_pending(std::move(match), std::string(id), opts, {}, entry);
  return nullptr;
}

const json* Invocation::run_new(Body body) {
  if (BodyScope* nested = scope()) return &nested->run_new(std::move(body));
  Pending& pending = pending_.back();
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
  if (entry != nullptr && entry->kind != StepKind::run) diverge(*entry, "step.start");
  if (entry != nullptr &&
      (entry->state == StepState::completed || entry->state == StepState::failed)) {
    slots_.push_back(Slot{entry, {}});
    return slots_.size() - 1;
  }
  note_new(entry != nullptr ? std::string_view(entry->key) : match.key,
           item ? "step.map" : "step.start", entry);
  return add_pending(std::move(match), std::move(base), opts, std::move(body), entry);
}

std::size_t Invocation::add_pending(ReplayCursor::Match match, std::string base,
                                    const StepOptions& opts, Body body, JournalEntry* retrying) {
  Pending& p = pending_.emplace_back();
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

// What a wait point's bodies came to: the outcome to journal, and what waits for a later round.
struct Invocation::Round {
  Outcome outcome{Outcome::Kind::step_done, {}, {}, {}, 0, {}, {}};
  std::optional<std::int64_t> wake;        // the earliest time something waits for
  std::optional<std::int64_t> retry_wake;  // the earliest retry this round wrote, and why
  std::string retry_reason;
  bool lost = false;       // a nested step's write was refused
  bool journaled = false;  // something beside failures for good is to be journaled
  std::deque<Pending> again;  // retries and held-back bodies, for a resident invocation
  std::vector<std::pair<std::size_t, std::string>> completed;  // slot, key

  void wake_at(std::int64_t t) { wake = wake ? std::min(*wake, t) : t; }
};

// A wait point: every pending body that is due runs now, concurrently. Whatever completed or
// must be retried is journaled. Under every_step that ends the invocation (false, ending_ set);
// resident (under on_recovery) the workflow goes on in place, after waiting out a short backoff.
// Steps that only failed for good are held, so that StepFailed reaches the workflow in this
// invocation.
bool Invocation::settle() {
  if (parallel_new_) {  // no body runs before its new siblings are known to be in order
    const NewCall call = std::move(*parallel_new_);
    parallel_new_.reset();
    check_strict(call);
  }
  while (!pending_.empty()) {
    run_due();
    Round round = fold();
    // A body abandoned at its timeout still runs on frames this invocation must keep: whatever
    // it ends in is handed over before it unwinds (and nothing goes on in place).
    const bool abandoned = any_abandoned();
    if (round.lost) {
      Outcome gone{Outcome::Kind::lost, {}, {}, {}, 0, "a nested step's write was refused", {}};
      if (abandoned) return hand_over(std::move(gone));
      end(std::move(gone));
    }
    // Only failures: StepFailed reaches the workflow now.
    if (!round.journaled && !round.wake && !abandoned) return true;
    for (EntryWrite& f : failed_) round.outcome.entries.push_back(std::move(f));
    failed_.clear();
    name_outcome(round);
    Outcome& outcome = round.outcome;
    if (abandoned) return hand_over(std::move(outcome));
    if (!stays_resident(outcome)) {
      ending_ = std::move(outcome);
      return false;
    }
    journal_in_place(outcome.entries);
    for (const auto& [slot, key] : round.completed) slots_[slot].entry = run_->journal.find(key);
    if (round.wake) park_in_place(*round.wake);
    pending_ = std::move(round.again);
  }
  return true;
}

// Runs the pending bodies that are due, concurrently, then the due transactions; a store that
// failed to write what a body ended in ends the invocation.
void Invocation::run_due() {
  const auto due = static_cast<std::size_t>(std::count_if(
      pending_.begin(), pending_.end(), [this](const Pending& p) { return p.due_ms <= now_ms_; }));
  const bool each_when_ended = config_->write_as_ended && due > 1;
  std::vector<BodyTask> bodies;
  for (Pending& p : pending_) {
    if (p.due_ms <= now_ms_ && !p.transaction) bodies.push_back(task_of(p, each_when_ended));
  }
  if (!bodies.empty()) {
    host_->carry_out(decide::RunBodies{bodies});
    now_ms_ = host_->now_ms();  // the bodies took time
  }
  for (Pending& p : pending_) {
    if (p.due_ms <= now_ms_ && p.transaction && !any_abandoned()) write_transaction(p);
  }
  bool written = false;
  for (const Pending& p : pending_) {
    if (p.write_error) {  // the store failed
      linger();           // not out of here while an abandoned body may use these frames
      store_failed(p.write_error);
    }
    written = written || p.written;
  }
  // Entries the step threads journaled are this invocation's own from here on: the calls after
  // them (a failure caught, the same id used again) number past them.
  if (written) cursor_.absorb_appended();
}

// Folds the pending steps, once their due bodies ran, into a round: the entries to journal
// (those the step threads did not write already), failures for good held in failed_, retries
// and what is not due yet kept to go again.
Invocation::Round Invocation::fold() {
  Round round;
  for (Pending& p : pending_) {
    round.lost = round.lost || p.lost;
    if (!p.result) {  // not due yet, or held back by a nested retry
      round.wake_at(p.postponed_until.value_or(p.due_ms));
      p.postponed_until.reset();
      round.again.push_back(std::move(p));
      continue;
    }
    EntryWrite write = std::move(*p.result);
    p.result.reset();
    const JournalEntry& e = write.entry;
    if (e.state == StepState::failed) {
      slots_[p.slot].failure = e.error;
      if (!p.written) failed_.push_back(std::move(write));
      continue;
    }
    round.journaled = true;
    if (e.state == StepState::retrying) {
      if (!round.retry_wake || *e.wake_at_ms < *round.retry_wake) {
        round.retry_wake = e.wake_at_ms;
        round.retry_reason = retry_text(e, p.options);
      }
      round.wake_at(*e.wake_at_ms);
      Pending& retry = round.again.emplace_back(std::move(p));
      retry.written = false;
      retry.attempt = e.attempts + 1;
      retry.due_ms = *e.wake_at_ms;
      retry.is_new = false;
    } else {
      round.completed.emplace_back(p.slot, e.key);
    }
    if (!p.written) round.outcome.entries.push_back(std::move(write));
  }
  pending_.clear();
  return round;
}

// The round's outcome as its history says it: a sleep until the next attempt, or what was
// journaled.
void Invocation::name_outcome(Round& round) const {
  Outcome& outcome = round.outcome;
  if (round.wake) {
    outcome.kind = Outcome::Kind::sleep;
    outcome.wake_at_ms = *round.wake;
    outcome.reason = round.retry_wake == round.wake
                         ? round.retry_reason
                         : "waiting for a step's next attempt at " + format_time(*round.wake);
    return;
  }
  const auto one = [this](const JournalEntry& e) {
    return step_label(e.key) + (e.state == StepState::failed ? " failed for good" : " completed");
  };
  outcome.reason = outcome.entries.size() == 1
                       ? one(outcome.entries.front().entry)
                       : std::to_string(outcome.entries.size()) + " parallel steps journaled";
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

// A pending step's body, to run at a wait point. A parallel body's entry is journaled as it ends,
// from its step thread, and added to the run's journal, so that a crash while its siblings run
// does not lose it. Nothing of that throws out of the body's thread or out of the runtime's
// commit: a failure is kept in p.write_error and rethrown on the workflow's side, once every
// body has returned.
BodyTask Invocation::task_of(Pending& p, bool journal_as_ended) {
  BodyTask task{[this, &p] { run_body(p); }, nullptr, nullptr};
  if (!journal_as_ended) return task;
  task.ended = [&p]() -> const EntryWrite* { return p.result && !p.lost ? &*p.result : nullptr; };
  task.written = when_written(p);
  return task;
}

// What becomes of p once its entry was written on its own (as its body ended, or a transaction's):
// it joins the run's journal, as the store wrote it (a transaction's body decides its entry
// there).
WriteDone Invocation::when_written(Pending& p) {
  return [this, &p](bool written, std::exception_ptr error) {
    if (error) {
      p.write_error = error;
      return;
    }
    if (!written) {
      p.lost = true;
      return;
    }
    try {
      if (const auto& tx = p.result->transaction; tx && tx->written) {
        p.result = EntryWrite{*tx->written, p.result->is_new};
      }
      JournalEntry entry = p.result->entry;
      entry.output_text = std::string();  // the journal keeps the parsed value only
      std::lock_guard lock(nested_mutex_);
      if (p.result->is_new) {
        run_->journal.append(std::move(entry));
      } else {
        run_->journal.update(std::move(entry));
      }
      p.written = true;
    } catch (...) {
      p.write_error = std::current_exception();
    }
  };
}

void Invocation::run_body(Pending& p) {
  const std::int64_t began = host_->now_ms();
  std::shared_ptr<Attempt> abandoned;
  try {
    // By value: an abandoned body outlives p.
    json output = Attempt::run(
        *host_, p.key, p.attempt, p.options, config_->max_output_bytes, nullptr,
        [this, key = p.key, attempt = p.attempt, body = p.body] {
          BodyScope scope(*this, key + "/");
          return host_->call_body(key, attempt, body);
        },
        abandoned);
    p.result = output_entry(p, std::move(output));
    p.result->entry.duration_ms = host_->now_ms() - began;
    p.result->entry.started_at_ms = began;
  } catch (const Postpone& postpone) {
    p.postponed_until = postpone.until_ms;
  } catch (const Lost&) {
    p.lost = true;
  } catch (...) {
    p.result = attempt_failed(p, std::current_exception());
    p.result->entry.duration_ms = host_->now_ms() - began;
    p.result->entry.started_at_ms = began;
  }
  if (abandoned) abandon(std::move(abandoned));
}

JournalEntry Invocation::entry_of(const Pending& p) const {
  JournalEntry entry;
  entry.key = p.key;
  entry.base = p.base;
  entry.kind = StepKind::run;
  entry.attempts = p.attempt;
  entry.invocation = run_->invocations + 1;
  return entry;
}

EntryWrite Invocation::output_entry(const Pending& p, json output) {
  JournalEntry entry = entry_of(p);
  std::string text;
  std::optional<std::string> refused;
  if (const auto problem = encode(output, text)) {
    refused = step_label(p.key) + " returned a value that cannot be journaled: " + *problem;
  } else if (text.size() > config_->max_output_bytes) {
    refused = step_label(p.key) + " returned " + human_bytes(text.size()) + "; the limit is " +
              human_bytes(config_->max_output_bytes) +
              " (RuntimeOptions::max_output_bytes). Store large data elsewhere and return a "
              "reference to it";
  }
  if (refused) {
    entry.state = StepState::failed;
    entry.error = ErrorInfo{"durable::NonRetryableError", with_id(errc::too_large, *refused), p.key,
                            p.attempt};
  } else {
    entry.state = StepState::completed;
    entry.output = std::move(output);
    entry.output_text = std::move(text);
  }
  return {std::move(entry), p.is_new};
}

EntryWrite Invocation::attempt_failed(const Pending& p, std::exception_ptr error) {
  ErrorInfo info = describe(error);
  info.step_id = p.key;
  info.attempts = p.attempt;
  const RetryPolicy& policy = policy_of(p.options);
  std::optional<std::chrono::milliseconds> retry_after;
  bool retryable = true;
  try {
    std::rethrow_exception(error);
  } catch (const NonRetryableError&) {
    retryable = false;
  } catch (const RetryAfterError& e) {
    retry_after = e.after;
  } catch (...) {
  }
  JournalEntry entry = entry_of(p);
  entry.error = info;
  if (!retryable || p.attempt >= policy.max_attempts) {
    entry.state = StepState::failed;
  } else {
    std::chrono::milliseconds delay{0};
    if (retry_after) {
      delay = *retry_after;
    } else {
      std::lock_guard lock(random_mutex_);
      delay = backoff(policy, p.attempt, *random_);
    }
    entry.state = StepState::retrying;
    // From when this attempt failed, not from when the invocation began: a body may run long.
    entry.wake_at_ms = host_->now_ms() + std::max<std::int64_t>(0, delay.count());
  }
  return {std::move(entry), p.is_new};
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
