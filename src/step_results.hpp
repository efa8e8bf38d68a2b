// SPDX-License-Identifier: Apache-2.0
#pragma once
// What an attempt of a step body comes to in its run's journal: the output it returned (or the
// refusal of one that cannot be journaled), a failure for good, or a retry after a backoff drawn
// from the run's generator.

#include <cstdint>
#include <durable/step.hpp>
#include <durable/workflow.hpp>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "journal.hpp"
#include "run_model.hpp"

namespace durable::detail {

class Host;
struct EngineConfig;

/// A step whose body is to run at the next wait point (or a nested step's, in its body).
struct PendingStep {
  std::string key, base;
  StepOptions options;
  int attempt = 1;
  bool is_new = true;
  std::int64_t due_ms = 0;  // a retry not due before this time
  Body body;
  std::size_t slot = 0;
  std::optional<EntryWrite> result;             // filled by the body's run
  std::optional<std::int64_t> postponed_until;  // a nested step's retry holds the body back
  bool lost = false;                            // a nested write was refused
  bool written = false;            // journaled by its step thread as it ended (parallel steps)
  std::exception_ptr write_error;  // that write failed
  TransactionBody transaction;     // a Step::transaction: run by the store, not a step thread
};

class StepResults {
 public:
  /// All five are the invocation's and outlive it.
  StepResults(const RunState& run, const Workflow& workflow, const EngineConfig& config,
              std::mt19937_64& random, Host& host)
      : run_(run), workflow_(workflow), config_(config), random_(random), host_(host) {}

  /// The entry an attempt of `p` writes, before its state is known.
  JournalEntry entry_of(const PendingStep& p) const;
  /// The attempt returned `output`: completed, or failed for good when the output cannot be
  /// journaled (not JSON, or over RuntimeOptions::max_output_bytes).
  EntryWrite completed(const PendingStep& p, json output) const;
  /// The attempt threw `error`: retrying after a backoff, or failed for good.
  EntryWrite failed(const PendingStep& p, std::exception_ptr error);
  /// Either of the two, for an attempt that began at `began` (ms) and ended now.
  EntryWrite ended(const PendingStep& p, std::int64_t began, std::optional<json> output,
                   std::exception_ptr error);
  /// The step's retry policy: its own, else its workflow's, else the default.
  const RetryPolicy& policy_of(const StepOptions& opts) const;
  /// 64 bits of the run's generator (step.uuid, step.random), which retries' jitter shares.
  std::uint64_t random_bits();

 private:
  const RunState& run_;
  const Workflow& workflow_;
  const EngineConfig& config_;
  std::mt19937_64& random_;
  Host& host_;
  std::mutex random_mutex_;  // random_: bodies on several threads draw from it
};

}  // namespace durable::detail
