// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// A workflow: a name and a function of (Step&, input) -> output, or of (Step&) -> output.

#include <durable/detail/json_convert.hpp>
#include <durable/detail/type_name.hpp>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <durable/step.hpp>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace durable {

namespace detail {

// The parameter and return types of a workflow function, read from its type (a function, a
// function pointer, or a class with one non-template call operator). A type they cannot be read
// from (a generic lambda, an overload set) has no members, so that Workflow can say so.
template <class R, class... A>
struct fn_types {
  using output = R;
  using params = std::tuple<A...>;
};
template <class M>
struct fn_traits {};
template <class R, class... A>
struct fn_traits<R(A...)> : fn_types<R, A...> {};
template <class R, class... A>
struct fn_traits<R(A...) noexcept> : fn_types<R, A...> {};
template <class R, class... A>
struct fn_traits<R (*)(A...)> : fn_types<R, A...> {};
template <class R, class... A>
struct fn_traits<R (*)(A...) noexcept> : fn_types<R, A...> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...)> : fn_types<R, A...> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const> : fn_types<R, A...> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) noexcept> : fn_types<R, A...> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const noexcept> : fn_types<R, A...> {};

template <class F>
struct signature : fn_traits<F> {};
template <class F>
requires requires { &F::operator(); }
struct signature<F> : fn_traits<decltype(&F::operator())> {};

/// F's types can be read: it has one signature.
template <class F>
concept Readable = requires {
  typename signature<F>::params;
};

/// F is called as fn(Step&, input) or fn(Step&).
template <class F>
concept WorkflowShape =
    Readable<F> &&(std::tuple_size_v<typename signature<F>::params> == 1 ||
                   std::tuple_size_v<typename signature<F>::params> == 2) &&
    std::is_same_v<std::tuple_element_t<0, typename signature<F>::params>, Step&>;

template <class F>
constexpr bool takes_input() {
  return std::tuple_size_v<typename signature<F>::params> == 2;
}

template <class F, bool = takes_input<F>()>
struct input_of {
  using type = std::remove_cvref_t<std::tuple_element_t<1, typename signature<F>::params>>;
};
template <class F>
struct input_of<F, false> {
  using type = void;
};

/// The checks of a workflow function's type, each a static_assert that says what to write; true
/// when all pass (Workflow builds nothing from a type that failed one).
template <class F>
constexpr bool check_workflow() {
  static_assert(Readable<F>,
                "durable: a workflow function's types must be readable: write (durable::Step& "
                "step, const Input& input) with a concrete Input type, not auto, and not a "
                "template or an overloaded function");
  if constexpr (Readable<F>) {
    static_assert(WorkflowShape<F>,
                  "durable: a workflow function takes (durable::Step& step, const Input& input), "
                  "or (durable::Step& step) for a workflow with no input");
    if constexpr (WorkflowShape<F>) {
      using In = typename input_of<F>::type;
      using Out = std::remove_cvref_t<typename signature<F>::output>;
      static_assert(std::is_void_v<In> || Parsable<In>,
                    "durable: a workflow's input type needs from_json. Declare "
                    "NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Type, field, ...) beside the type (or "
                    "from_json in its namespace), or take const durable::json&");
      static_assert(std::is_void_v<Out> || Writable<Out>,
                    "durable: a workflow's result type needs to_json. Declare "
                    "NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Type, field, ...) beside the type (or "
                    "to_json in its namespace), or return durable::json");
      return (std::is_void_v<In> || Parsable<In>)&&(std::is_void_v<Out> || Writable<Out>);
    }
  }
  return false;
}

[[noreturn]] void throw_bad_input(const std::string& workflow, std::string_view type,
                                  const std::exception& error);
// A workflow that takes no input was given some: anything but null or {}.
void check_no_input(const std::string& workflow, const json& input);

}  // namespace detail

/// A named workflow function. fn is one of
///   Out fn(durable::Step&, const In&)   typed: In and Out convert with nlohmann's to_json and
///                                       from_json (std::optional of such a type too); Out may
///                                       be void
///   json fn(durable::Step&, const json&)
///   Out fn(durable::Step&)               no input: a run is started with null or {}
/// with concrete types (a lambda's input cannot be auto). The function runs again from the top
/// on every invocation: code outside steps must be safe to repeat, and must reach the same steps
/// with the same ids for the same journal.
class Workflow {
 public:
  template <class F>
  Workflow(std::string name, F fn, WorkflowOptions opts = {})
      : name_(std::move(name)), options_(std::move(opts)) {
    using Fn = std::decay_t<F>;
    if constexpr (detail::check_workflow<Fn>()) {
      using In = typename detail::input_of<Fn>::type;
      using Out = std::remove_cvref_t<typename detail::signature<Fn>::output>;
      if constexpr (std::is_void_v<In>) {
        check_ = [name = name_](const json& input) { detail::check_no_input(name, input); };
        fn_ = [fn = std::move(fn)](Step& step, const json&) mutable -> json {
          if constexpr (std::is_void_v<Out>) {
            fn(step);
            return nullptr;
          } else {
            return detail::to_value(fn(step));
          }
        };
      } else if constexpr (std::is_same_v<In, json> && std::is_same_v<Out, json> &&
                           std::is_invocable_r_v<json, F&, Step&, const json&>) {
        fn_ = std::move(fn);
        check_ = [](const json&) {};
      } else {
        check_ = [name = name_](const json& input) { (void)decode<In>(name, input); };
        fn_ = [name = name_, fn = std::move(fn)](Step& step, const json& input) mutable -> json {
          if constexpr (std::is_void_v<Out>) {
            fn(step, decode<In>(name, input));
            return nullptr;
          } else {
            // One full-expression: a result that points into the decoded input (a string_view,
            // a const char*) is read before the input is destroyed.
            return detail::to_value(fn(step, decode<In>(name, input)));
          }
        };
      }
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
    try {
      return detail::from_value<In>(input);
    } catch (const json::exception& e) {
      detail::throw_bad_input(name, detail::type_name<In>(), e);
    }
  }

  std::string name_;
  WorkflowOptions options_;
  std::function<json(Step&, const json&)> fn_;
  std::function<void(const json&)> check_;
};

}  // namespace durable
