// SPDX-License-Identifier: Apache-2.0
#include "step_results.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "engine.hpp"
#include "errors_internal.hpp"
#include "retry.hpp"
#include "serialization.hpp"

namespace durable::detail {

JournalEntry StepResults::entry_of(const PendingStep& p) const {
  JournalEntry entry;
  entry.key = p.key;
  entry.base = p.base;
  entry.kind = StepKind::run;
  entry.attempts = p.attempt;
  entry.invocation = run_.invocations + 1;
  return entry;
}

EntryWrite StepResults::completed(const PendingStep& p, json output) const {
  JournalEntry entry = entry_of(p);
  std::string text;
  std::optional<std::string> refused;
  if (const auto problem = encode(output, text)) {
    refused =
        step_label(p.key, run_.id) + " returned a value that cannot be journaled: " + *problem;
  } else if (text.size() > config_.max_output_bytes) {
    refused = step_label(p.key, run_.id) + " returned " + human_bytes(text.size()) +
              "; the limit is " + human_bytes(config_.max_output_bytes) +
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

EntryWrite StepResults::failed(const PendingStep& p, std::exception_ptr error) {
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
      delay = backoff(policy, p.attempt, random_);
    }
    entry.state = StepState::retrying;
    // From when this attempt failed, not from when the invocation began: a body may run long.
    entry.wake_at_ms = host_.now_ms() + std::max<std::int64_t>(0, delay.count());
  }
  return {std::move(entry), p.is_new};
}

const RetryPolicy& StepResults::policy_of(const StepOptions& opts) const {
  static const RetryPolicy kDefault{};
  if (opts.retry) return *opts.retry;
  if (workflow_.options().retry) return *workflow_.options().retry;
  return kDefault;
}

EntryWrite StepResults::ended(const PendingStep& p, std::int64_t began, std::optional<json> output,
                              std::exception_ptr error) {
  EntryWrite write = output ? completed(p, std::move(*output)) : failed(p, std::move(error));
  write.entry.duration_ms = host_.now_ms() - began;
  write.entry.started_at_ms = began;
  return write;
}

std::uint64_t StepResults::random_bits() {
  const std::lock_guard lock(random_mutex_);
  return random_();
}

}  // namespace durable::detail
