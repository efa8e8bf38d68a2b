// SPDX-License-Identifier: Apache-2.0
#include "pending_steps.hpp"

#include <algorithm>

#include "attempt.hpp"
#include "body_scope.hpp"
#include "engine.hpp"
#include "sql_access.hpp"

namespace durable::detail {

PendingSteps::PendingSteps(Context context) : c_(context) {}

PendingSteps::~PendingSteps() = default;

// The bodies due run concurrently, then the due transactions. A store that failed to write what
// a body ended in is handed back, once no abandoned body may use the invocation's frames.
PendingSteps::Ran PendingSteps::run_due(std::int64_t& now_ms) {
  const auto due = static_cast<std::size_t>(
      std::count_if(pending_.begin(), pending_.end(),
                    [now_ms](const PendingStep& p) { return p.due_ms <= now_ms; }));
  const bool each_when_ended = c_.config.write_as_ended && due > 1;
  std::vector<BodyTask> bodies;
  for (PendingStep& p : pending_) {
    if (p.due_ms <= now_ms && !p.transaction) bodies.push_back(task_of(p, each_when_ended));
  }
  if (!bodies.empty()) {
    c_.host.carry_out(decide::RunBodies{bodies});
    now_ms = c_.host.now_ms();  // the bodies took time
  }
  for (PendingStep& p : pending_) {
    if (p.due_ms <= now_ms && p.transaction && !any_abandoned()) write_transaction(p);
  }
  Ran ran;
  for (const PendingStep& p : pending_) {
    if (p.write_error) {  // the store failed
      linger();           // not out of here while an abandoned body may use these frames
      ran.write_error = p.write_error;
      return ran;
    }
    ran.written = ran.written || p.written;
  }
  return ran;
}

// The entries to journal (those the step threads did not write already), failures for good
// apart, retries and what is not due yet kept to go again.
PendingSteps::Round PendingSteps::fold() {
  Round round;
  for (PendingStep& p : pending_) {
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
      round.failures.emplace_back(p.slot, e.error);
      if (!p.written) round.failed.push_back(std::move(write));
      continue;
    }
    round.journaled = true;
    if (e.state == StepState::retrying) {
      if (!round.retry || *e.wake_at_ms < *round.retry->wake_at_ms) {
        round.retry = e;
        round.retry_options = p.options;
      }
      round.wake_at(*e.wake_at_ms);
      PendingStep& retry = round.again.emplace_back(std::move(p));
      retry.written = false;
      retry.attempt = e.attempts + 1;
      retry.due_ms = *e.wake_at_ms;
      retry.is_new = false;
    } else {
      round.completed.emplace_back(p.slot, e.key);
    }
    if (!p.written) round.entries.push_back(std::move(write));
  }
  pending_.clear();
  return round;
}

// A pending step's body, to run at a wait point. A parallel body's entry is journaled as it ends,
// from its step thread, and added to the run's journal, so that a crash while its siblings run
// does not lose it. Nothing of that throws out of the body's thread or out of the runtime's
// commit: a failure is kept in p.write_error and handed back on the workflow's side, once every
// body has returned.
BodyTask PendingSteps::task_of(PendingStep& p, bool journal_as_ended) {
  BodyTask task{[this, &p] { run_body(p); }, nullptr, nullptr};
  if (!journal_as_ended) return task;
  task.ended = [&p]() -> const EntryWrite* { return p.result && !p.lost ? &*p.result : nullptr; };
  task.written = when_written(p);
  return task;
}

// What becomes of p once its entry was written on its own (as its body ended, or a transaction's):
// it joins the run's journal, as the store wrote it (a transaction's body decides its entry
// there).
WriteDone PendingSteps::when_written(PendingStep& p) {
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
      JournalEntry entry = p.result->entry;  // copied before the lock is taken
      std::lock_guard lock(c_.journal_mutex);
      c_.run.journal.record(std::move(entry), p.result->is_new);
      p.written = true;
    } catch (...) {
      p.write_error = std::current_exception();
    }
  };
}

void PendingSteps::run_body(PendingStep& p) {
  const std::int64_t began = c_.host.now_ms();
  std::shared_ptr<Attempt> abandoned;
  try {
    // By value: an abandoned body outlives p (the invocation and its host wait for it).
    json output = Attempt::run(
        c_.host, p.key, p.attempt, p.options, c_.config.max_output_bytes, nullptr,
        [invocation = &c_.invocation, host = &c_.host, key = p.key, attempt = p.attempt,
         body = p.body] {
          BodyScope scope(*invocation, key + "/");
          return host->call_body(key, attempt, body);
        },
        abandoned);
    p.result = c_.results.ended(p, began, std::move(output), nullptr);
  } catch (const Postpone& postpone) {
    p.postponed_until = postpone.until_ms;
  } catch (const Lost&) {
    p.lost = true;
  } catch (...) {
    p.result = c_.results.ended(p, began, std::nullopt, std::current_exception());
  }
  if (abandoned) abandon(std::move(abandoned));
}

void PendingSteps::write_transaction(PendingStep& p) {
  EntryWrite write{c_.results.entry_of(p), p.is_new, std::make_shared<TransactionStep>()};
  write.entry.state = StepState::completed;  // until the store runs the body
  TransactionStep& tx = *write.transaction;
  const std::int64_t began = c_.host.now_ms();
  tx.run = [this, &p, began](SqlSession& session) {
    const BodyScope scope(c_.invocation, p.key + "/", true);  // step tools refuse inside
    Sql& sql = *sqls_.emplace_back(SqlAccess::make(session, p.key));
    struct End {
      Sql* sql;
      ~End() { SqlAccess::end(*sql); }
    } end{&sql};
    // Through call_body like any body: the test kit sees it (mocks, the crash sweep).
    json output = c_.host.call_body(p.key, p.attempt, [&] { return p.transaction(sql); });
    if (c_.host.halted()) throw Halted{};
    EntryWrite done = c_.results.ended(p, began, std::move(output), nullptr);
    // A result that cannot be journaled fails the step: its writes must not commit without it.
    if (done.entry.state != StepState::completed) {
      throw NonRetryableError(done.entry.error ? done.entry.error->message : "not journaled");
    }
    return done;
  };
  tx.failed = [this, &p, began](std::exception_ptr error) {
    if (c_.host.halted()) throw Halted{};  // the crash sweep's crash: nothing is written
    return c_.results.ended(p, began, std::nullopt, std::move(error));
  };
  p.result = std::move(write);
  try {
    c_.host.carry_out(decide::WriteTransaction{*p.result, when_written(p)});
  } catch (...) {
    p.write_error = std::current_exception();
  }
  // A host that runs nothing (testing::replay's) left it unwritten: a step not done yet.
  if (!p.written && !p.lost && !p.write_error) p.result.reset();
}

void PendingSteps::abandon(std::shared_ptr<Attempt> attempt) {
  std::lock_guard lock(abandoned_mutex_);
  abandoned_.push_back(std::move(attempt));
}

bool PendingSteps::any_abandoned() {
  std::lock_guard lock(abandoned_mutex_);
  return !abandoned_.empty();
}

void PendingSteps::linger() {
  if (!any_abandoned()) return;
  c_.host.carry_out(decide::Linger{[this] {
    std::lock_guard lock(abandoned_mutex_);
    return std::all_of(abandoned_.begin(), abandoned_.end(),
                       [](const std::shared_ptr<Attempt>& a) { return a->ended(); });
  }});
}

}  // namespace durable::detail
