// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// durable::Saga: steps that each register how to undo them, undone last first when the
/// workflow gives up part of the way.

#include <durable/errors.hpp>
#include <durable/step.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace durable {

/// Compensation for a workflow's steps (one Saga per workflow invocation, made in the workflow
/// function, used from it only, not from inside a step body):
///
///     durable::Saga saga(step);
///     try {
///       const auto hold = saga.run("reserve", [&] { return reserve(order); },
///                                  [&](const json& hold) { release(hold); });
///       saga.run("charge", [&] { return charge(order); },
///                [&](const std::string& payment) { refund(payment); });
///       saga.run("ship", [&] { return ship(order); }, [] {});
///     } catch (const durable::StepFailed&) {
///       saga.compensate();  // refund, then release: each once, however often the run replays
///       throw;
///     }
///
/// The undos live in memory: a replay re-registers them as it meets the journaled steps again,
/// so they must be made from the same code each time. Not thread-safe (the workflow function's
/// thread only).
class Saga {
 public:
  explicit Saga(Step& step) : step_(&step) {}

  /// step.run(id, fn, opts), and, once that has returned, registers `undo`: a body called with
  /// a copy of fn's result (as `const R&`, or by value), or with nothing. A step that throws
  /// (StepFailed: it failed for good) registers nothing. Returns what step.run returns.
  template <class F, class U>
  auto run(std::string_view id, F&& fn, U&& undo, StepOptions opts = {},
           detail::SourceLocation where = detail::SourceLocation::current()) {
    using R = decltype(step_->run(id, std::forward<F>(fn), opts, where));
    auto owned = std::make_shared<std::decay_t<U>>(std::forward<U>(undo));
    if constexpr (std::is_void_v<R>) {
      static_assert(std::is_invocable_v<std::decay_t<U>&>,
                    "durable::Saga::run: the step returns nothing, so its undo takes nothing: "
                    "write [&] { ... }");
      step_->run(id, std::forward<F>(fn), std::move(opts), where);
      add(id, [owned] { (*owned)(); });
    } else {
      static_assert(
          std::is_invocable_v<std::decay_t<U>&, const R&> || std::is_invocable_v<std::decay_t<U>&>,
          "durable::Saga::run: the undo takes the step's result (const R&) or nothing");
      R result = step_->run(id, std::forward<F>(fn), std::move(opts), where);
      if constexpr (std::is_invocable_v<std::decay_t<U>&, const R&>) {
        add(id, [owned, result] { (*owned)(result); });
      } else {
        add(id, [owned] { (*owned)(); });
      }
      return result;
    }
  }

  /// Runs the registered undos as steps, the last registered first: the undo of step "charge"
  /// is step "undo:charge" (journaled like any step: once per run, across replays and crashes,
  /// and retried per opts.retry when its body throws). An undo that fails for good does not
  /// stop the others: each is tried, and then the first such failure is thrown (StepFailed).
  /// The undos are forgotten as it begins, so a second call undoes only steps run since.
  void compensate(StepOptions opts = {}) {
    std::vector<Undo> undos = std::exchange(undos_, {});
    std::exception_ptr first;
    for (auto it = undos.rbegin(); it != undos.rend(); ++it) {
      try {
        step_->run("undo:" + it->id, it->body, opts);
      } catch (const StepFailed&) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  /// How many undos are registered and not yet run.
  std::size_t pending() const { return undos_.size(); }

 private:
  struct Undo {
    std::string id;
    std::function<void()> body;
  };
  void add(std::string_view id, std::function<void()> body) {
    undos_.push_back({std::string(id), std::move(body)});
  }

  Step* step_;
  std::vector<Undo> undos_;
};

}  // namespace durable
