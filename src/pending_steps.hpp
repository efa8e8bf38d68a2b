// SPDX-License-Identifier: Apache-2.0
#pragma once
// The steps an invocation started whose bodies have not run yet, and their wait point: every
// body that is due runs then, concurrently, on the host's step threads (a transaction's in the
// store's transaction), and what they came to is folded into a round for the invocation to
// journal. A body abandoned at its timeout is kept until it returns.

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "decision.hpp"
#include "journal.hpp"
#include "step_results.hpp"

namespace durable {
class Sql;
}

namespace durable::detail {

class Attempt;
class Host;
class Invocation;
struct EngineConfig;
struct Outcome;

class PendingSteps {
 public:
  /// What its bodies work with: all of the invocation's, and outliving it.
  struct Context {
    Invocation& invocation;  // the scope of the bodies' nested calls
    Host& host;
    RunState& run;
    const EngineConfig& config;
    StepResults& results;
    std::mutex& journal_mutex;  // the run's journal, while bodies run nested steps
  };
  explicit PendingSteps(Context context);
  ~PendingSteps();

  PendingStep& add() { return pending_.emplace_back(); }
  PendingStep& back() { return pending_.back(); }
  std::size_t size() const { return pending_.size(); }
  bool empty() const { return pending_.empty(); }

  /// What a wait point's bodies came to.
  struct Round {
    std::vector<EntryWrite> entries;    // to journal
    std::optional<std::int64_t> wake;   // the earliest time something waits for
    std::optional<JournalEntry> retry;  // the earliest retry this round wrote
    StepOptions retry_options;          // and its step's options
    bool lost = false;                  // a nested step's write was refused
    bool journaled = false;             // something beside failures for good is journaled
    std::deque<PendingStep> again;      // retries and held-back bodies
    std::vector<std::pair<std::size_t, std::string>> completed;              // slot, key
    std::vector<std::pair<std::size_t, std::optional<ErrorInfo>>> failures;  // slot, error
    std::vector<EntryWrite> failed;  // failures for good not written by their step thread

    void wake_at(std::int64_t t) { wake = wake ? std::min(*wake, t) : t; }
  };
  /// What running the due bodies came to.
  struct Ran {
    std::exception_ptr write_error;  // the store failed to write what a body ended in
    bool written = false;            // a step thread journaled an entry as its body ended
  };
  /// Runs the bodies due at `now_ms`, concurrently, then the due transactions; `now_ms` is moved
  /// on by the time they took.
  Ran run_due(std::int64_t& now_ms);
  /// Folds the steps, once their due bodies ran, into a round; none is pending after it.
  Round fold();
  /// The steps of a round that go again (resident: after waiting in place).
  void go_again(std::deque<PendingStep> again) { pending_ = std::move(again); }

  bool any_abandoned();
  /// Waits until every abandoned body has returned (at once when none was abandoned).
  void linger();

 private:
  void run_body(PendingStep& p);
  WriteDone when_written(PendingStep& p);
  BodyTask task_of(PendingStep& p, bool journal_as_ended);
  // A Step::transaction's attempt: its body runs in the store's transaction that journals it.
  void write_transaction(PendingStep& p);
  void abandon(std::shared_ptr<Attempt> attempt);

  Context c_;
  std::deque<PendingStep> pending_;
  // The Sql objects transaction bodies were given: kept, ended, for the invocation's life, so
  // that one kept past its body's call throws instead of reaching freed memory.
  std::vector<std::unique_ptr<Sql>> sqls_;
  std::mutex abandoned_mutex_;  // abandoned_: bodies on several threads add to it
  std::vector<std::shared_ptr<Attempt>> abandoned_;  // attempts abandoned, still running
};

}  // namespace durable::detail
