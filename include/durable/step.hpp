#pragma once
/// \file
/// The step tools a workflow function receives.

#include <chrono>
#include <durable/detail/type_name.hpp>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace durable {

namespace detail {
class Invocation;

/// The type step.run returns for a body returning T: T itself, except that text that would
/// point into the journal (const char*, std::string_view) comes back as a std::string.
template <class T>
using step_result_t =
    std::conditional_t<std::is_same_v<T, const char*> || std::is_same_v<T, char*> ||
                           std::is_same_v<T, std::string_view>,
                       std::string, T>;
}  // namespace detail

/// The step tools of one invocation of a run. A workflow function receives a Step& and uses it
/// from its own code (not from a step body). Not thread-safe; not to be kept past the call.
///
/// Step ids name journal entries. They are matched by id, not position: reusing an id in one
/// run is legal and its n-th use gets the key "id#n" (n >= 2), in call order. Ids must be
/// non-empty and must not contain '/', '#', '[' or ']', which durable reserves for keys.
class Step {
 public:
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  /// Runs fn() once per run and returns its result (T = fn's return type, or void). If the
  /// journal holds a result for this id, returns it without calling fn. Otherwise calls fn,
  /// journals its result and ends the invocation; the runtime then invokes the workflow again.
  /// T converts to and from JSON through nlohmann's to_json/from_json; text returned as a
  /// const char* or std::string_view comes back as a std::string.
  ///
  /// Throws StepFailed for a step that failed for good (on every replay after the failure was
  /// journaled); Error
  /// when the journaled result no longer converts to T, or the id is not a valid step id;
  /// NonDeterminism when the id was journaled as another kind of step.
  /// An exception out of fn is one failed attempt: retried per opts.retry, else the workflow's
  /// policy, else RetryPolicy{}. NonRetryableError fails the step at once; RetryAfterError sets
  /// the next delay.
  template <class F>
  auto run(std::string_view id, F&& fn, StepOptions opts = {});

  /// Sleeps the run for d: journals the wake time and ends the invocation; the run is sleeping,
  /// holding no thread, until then. On replay after the wake time, returns at once. Rounded up
  /// to whole milliseconds; throws Error for a duration over 30,000 years or not a number.
  template <class Rep, class Period>
  void sleep(std::string_view id, std::chrono::duration<Rep, Period> d) {
    // Through double milliseconds: no duration (hours::max() included) can overflow on the way.
    sleep_for(id, std::chrono::duration<double, std::milli>(d));
  }
  /// As above with a duration in text: "30s", "90 seconds", "1 hour", "2 hours", "1 day",
  /// "1h30m", "500ms". Throws Error for text that is not a duration.
  void sleep(std::string_view id, std::string_view d);
  /// Sleeps the run until t (returns at once on the next invocation if t has passed).
  void sleep_until(std::string_view id, Clock::time_point t);

  /// The id of the run this invocation belongs to.
  std::string_view run_id() const;
  /// The run's correlation id, from start() or generated.
  std::string_view correlation_id() const;
  /// True while this invocation re-executes code whose steps the journal already holds: from the
  /// top of the function until the first step that is not journaled.
  bool replaying() const;

 private:
  friend class detail::Invocation;
  explicit Step(detail::Invocation& invocation) : invocation_(&invocation) {}

  // The non-template halves of run(), in src/step.cpp.
  const json* begin_run(std::string_view id, const StepOptions& opts);
  const json& finish_run(json output);
  [[noreturn]] void fail_run(std::exception_ptr error);
  [[noreturn]] void bad_conversion(const json& value, std::string_view type,
                                   const std::exception& error);
  void sleep_for(std::string_view id, std::chrono::duration<double, std::milli> d);

  template <class T>
  T convert(const json& value) {
    if constexpr (std::is_same_v<T, json>) {
      return value;
    } else {
      try {
        return value.template get<T>();
      } catch (const json::exception& e) {
        bad_conversion(value, detail::type_name<T>(), e);
      }
    }
  }

  detail::Invocation* invocation_;
};

template <class F>
auto Step::run(std::string_view id, F&& fn, StepOptions opts) {
  using T = detail::step_result_t<std::decay_t<std::invoke_result_t<F&>>>;
  const json* memo = begin_run(id, opts);
  if (memo == nullptr) {
    json output;
    try {
      if constexpr (std::is_void_v<T>) {
        fn();
      } else {
        output = json(fn());
      }
    } catch (...) {
      fail_run(std::current_exception());
    }
    memo = &finish_run(std::move(output));
  }
  if constexpr (!std::is_void_v<T>) return convert<T>(*memo);
}

}  // namespace durable
