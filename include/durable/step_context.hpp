// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What a step body may take to learn about its attempt: a stop token, heartbeats, and the
/// progress earlier attempts reported.

#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>

namespace durable {

using json = nlohmann::json;

namespace detail {
class Attempt;
}

/// Given to a step body declared with a parameter of this type:
/// `step.run("crunch", [&](durable::StepContext& ctx) { ... }, {.timeout = ...})`. Valid for
/// the body's call only; use it from the body's own thread.
class StepContext {
 public:
  StepContext(const StepContext&) = delete;
  StepContext& operator=(const StepContext&) = delete;

  /// Requested when the runtime gives up on this attempt (StepOptions::timeout or
  /// heartbeat_timeout passed): whatever the body returns from then on is dropped, so a body
  /// that can stop early should.
  std::stop_token stop_token() const;
  /// Tells the runtime the body is alive (StepOptions::heartbeat_timeout counts from here) and
  /// how far it got. The progress is stored (at most once a second, and the last one when the
  /// attempt ends), shown by `durable show` and the HTTP API while the step has not completed,
  /// and given to the step's next attempt by last_heartbeat(). Progress that cannot be stored
  /// (larger than RuntimeOptions::max_output_bytes, or not JSON text) throws Error.
  void heartbeat(json progress = nullptr);
  /// The progress last reported for this step: by this attempt once it has reported some, else
  /// by the attempt before it (in this process or another); nullopt when none was.
  std::optional<json> last_heartbeat() const;
  /// 1 for the first attempt of the step, 2 for the second, ...
  int attempt() const;
  /// The step's journal key ("charge", "outer/inner", "items[2]").
  const std::string& step_key() const;

 private:
  friend class detail::Attempt;
  explicit StepContext(detail::Attempt& attempt) : attempt_(&attempt) {}
  detail::Attempt* attempt_;
};

}  // namespace durable
