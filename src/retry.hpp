// SPDX-License-Identifier: Apache-2.0
#pragma once
// Retry delays.

#include <chrono>
#include <durable/options.hpp>
#include <random>
#include <string_view>

namespace durable::detail {

/// The delay before the attempt after `attempt` (1-based) failed:
/// min(initial * multiplier^(attempt-1), max), then scaled by a factor drawn uniformly from
/// [1 - jitter, 1 + jitter]. Never negative.
std::chrono::milliseconds backoff(const RetryPolicy& policy, int attempt, std::mt19937_64& random);

/// Throws Error when a policy cannot work (no attempts, negative delays, jitter outside [0, 1]).
void check_policy(const RetryPolicy& policy, std::string_view where);
/// Throws Error for options a step cannot run with (its policy, as above; a negative timeout).
void check_step_options(const StepOptions& options, std::string_view where);

}  // namespace durable::detail
