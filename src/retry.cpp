// SPDX-License-Identifier: Apache-2.0
#include "retry.hpp"

#include <algorithm>
#include <cmath>
#include <durable/errors.hpp>
#include <string>

namespace durable::detail {

std::chrono::milliseconds backoff(const RetryPolicy& policy, int attempt, std::mt19937_64& random) {
  const double cap = static_cast<double>(policy.max_backoff.count());
  double delay = static_cast<double>(policy.initial_backoff.count()) *
                 std::pow(policy.multiplier, std::max(0, attempt - 1));
  delay = std::min(delay, cap);
  if (policy.jitter > 0) {
    std::uniform_real_distribution<double> spread(1.0 - policy.jitter, 1.0 + policy.jitter);
    delay *= spread(random);
  }
  return std::chrono::milliseconds(std::max<std::int64_t>(0, std::llround(delay)));
}

void check_policy(const RetryPolicy& policy, std::string_view where) {
  const auto fail = [&](const std::string& why) {
    throw Error(errc::invalid_argument, "the retry policy of " + std::string(where) + " " + why);
  };
  if (policy.max_attempts < 1) fail("has max_attempts < 1; it counts the first attempt too");
  if (policy.initial_backoff.count() < 0 || policy.max_backoff.count() < 0)
    fail("has a negative backoff");
  if (!(policy.multiplier >= 1.0)) fail("has a multiplier below 1");
  if (!(policy.jitter >= 0.0 && policy.jitter <= 1.0)) fail("has a jitter outside [0, 1]");
}

void check_step_options(const StepOptions& options, std::string_view where) {
  if (options.retry) check_policy(*options.retry, where);
  if (options.timeout.count() < 0) {
    throw Error(errc::invalid_argument,
                std::string(where) + ": StepOptions::timeout is negative (" +
                    std::to_string(options.timeout.count()) + " ms); 0 means none");
  }
  if (options.heartbeat_timeout.count() < 0) {
    throw Error(errc::invalid_argument,
                std::string(where) + ": StepOptions::heartbeat_timeout is negative (" +
                    std::to_string(options.heartbeat_timeout.count()) + " ms); 0 means none");
  }
}

}  // namespace durable::detail
