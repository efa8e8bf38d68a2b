// SPDX-License-Identifier: Apache-2.0
#pragma once
// Nested steps: the context of a step body running on a step thread. Its own step calls are
// keyed under the body's key and journaled at once, since they do not end the invocation.
// Private to the engine (engine.cpp, body_scope.cpp).

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engine.hpp"

namespace durable::detail {

// Thrown out of a step body when a nested step's retry is not due yet: the outer step's body
// stops and runs again once it is. Not a std::exception, like the runtime's own unwinding.
struct Postpone {
  std::int64_t until_ms;
};
// Thrown out of a step body when a nested step's write was refused (cancelled, taken over).
struct Lost {};

// " (at file:line)" of the step call being made, or nothing when unknown.
std::string at_call_site();

class BodyScope {
 public:
  /// `transaction`: the body of a Step::transaction, which runs inside the store's write and
  /// may call no step tool.
  BodyScope(Invocation& invocation, std::string prefix, bool transaction = false);
  ~BodyScope();
  BodyScope(const BodyScope&) = delete;
  BodyScope& operator=(const BodyScope&) = delete;

  /// The scope of the body this thread runs now, if any.
  static BodyScope* current();
  Invocation& invocation() const { return *invocation_; }

  [[noreturn]] void refuse(std::string_view tool, std::string_view id) const;
  /// Whether this is the body of a Step::transaction (which may use its durable::Sql only).
  bool transaction() const { return transaction_; }
  const json* begin_run(std::string_view id, const StepOptions& opts);
  const json& run_new(Body body);
  std::size_t start_step(std::string_view id, const StepOptions& opts, Body body,
                         std::optional<std::size_t> item);
  const json& await(std::size_t slot);
  bool ready(std::size_t slot) const { return pending_.at(slot).result.has_value(); }

 private:
  PendingStep& add(std::string_view id, const StepOptions& opts, std::optional<std::size_t> item);
  void run(PendingStep& p);
  const json* finish(const PendingStep& p);

  Invocation* invocation_;
  Attempt* attempt_;  // whose body this is: its nested writes stop once it is abandoned
  bool transaction_;  // a Step::transaction's body
  std::string prefix_;
  BodyScope* outer_;
  std::deque<PendingStep> pending_;
  std::unordered_map<std::string, int> uses_;
};

}  // namespace durable::detail
