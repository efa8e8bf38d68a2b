// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// A workflow: a name and a function of (Step&, input) -> output.

#include <durable/detail/type_name.hpp>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <durable/step.hpp>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace durable {

namespace detail {

// The parameter and return types of a callable's call operator, for the typed form.
template <class F>
struct signature : signature<decltype(&F::operator())> {};
template <class R, class S, class A>
struct signature<R (*)(S, A)> {
  using input = std::remove_cvref_t<A>;
  using output = R;
};
template <class R, class S, class A>
struct signature<R(S, A)> : signature<R (*)(S, A)> {};
template <class C, class R, class S, class A>
struct signature<R (C::*)(S, A) const> : signature<R (*)(S, A)> {};
template <class C, class R, class S, class A>
struct signature<R (C::*)(S, A)> : signature<R (*)(S, A)> {};
template <class C, class R, class S, class A>
struct signature<R (C::*)(S, A) const noexcept> : signature<R (*)(S, A)> {};
template <class C, class R, class S, class A>
struct signature<R (C::*)(S, A) noexcept> : signature<R (*)(S, A)> {};

[[noreturn]] void throw_bad_input(const std::string& workflow, std::string_view type,
                                  const std::exception& error);

}  // namespace detail

/// A named workflow function. fn is either json(Step&, const json&) or typed, Out(Step&, const
/// In&), where In and Out convert with nlohmann's to_json/from_json and Out may be void. The
/// function runs again from the top on every invocation: code outside steps must be safe to
/// repeat, and must reach the same steps with the same ids for the same journal.
class Workflow {
 public:
  template <class F>
  Workflow(std::string name, F fn, WorkflowOptions opts = {})
      : name_(std::move(name)), options_(std::move(opts)) {
    if constexpr (std::is_invocable_r_v<json, F&, Step&, const json&> &&
                  std::is_same_v<typename detail::signature<std::decay_t<F>>::input, json>) {
      fn_ = std::move(fn);
      check_ = [](const json&) {};
    } else {
      using In = typename detail::signature<std::decay_t<F>>::input;
      using Out = typename detail::signature<std::decay_t<F>>::output;
      check_ = [name = name_](const json& input) { (void)decode<In>(name, input); };
      fn_ = [name = name_, fn = std::move(fn)](Step& step, const json& input) mutable -> json {
        if constexpr (std::is_void_v<Out>) {
          fn(step, decode<In>(name, input));
          return nullptr;
        } else {
          return json(fn(step, decode<In>(name, input)));
        }
      };
    }
  }

  /// The name runs are started by.
  const std::string& name() const { return name_; }
  /// The options given at construction.
  const WorkflowOptions& options() const { return options_; }

  /// Calls the function (the runtime does this; workflow authors do not).
  json invoke(Step& step, const json& input) const { return fn_(step, input); }
  /// Throws InvalidInput when input does not convert to the typed function's input type.
  void check_input(const json& input) const { check_(input); }

 private:
  template <class In>
  static In decode(const std::string& name, const json& input) {
    if constexpr (std::is_same_v<In, json>) {
      return input;
    } else {
      try {
        return input.template get<In>();
      } catch (const json::exception& e) {
        detail::throw_bad_input(name, detail::type_name<In>(), e);
      }
    }
  }

  std::string name_;
  WorkflowOptions options_;
  std::function<json(Step&, const json&)> fn_;
  std::function<void(const json&)> check_;
};

}  // namespace durable
