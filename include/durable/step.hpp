// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The step tools a workflow function receives.

#include <chrono>
#include <cstdint>
#include <durable/detail/json_convert.hpp>
#include <durable/detail/source_location.hpp>
#include <durable/detail/type_name.hpp>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <durable/sql.hpp>
#include <durable/step_context.hpp>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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

/// A step body with its result turned into JSON (null for void); the engine runs it.
using Body = std::function<json()>;
/// The body of a Step::transaction, likewise; the store runs it in the step's transaction.
using TransactionBody = std::function<json(Sql&)>;

/// Records where in the workflow's source the step tool being called was called from (per
/// thread), for the messages of NonDeterminism.
void note_call(const detail::SourceLocation& where) noexcept;

/// A step's result type is checked before anything is built from it, so that a type with no JSON
/// conversion stops at this message rather than at a wall of nlohmann's template errors.
template <class T>
constexpr bool check_step_result() {
  static_assert(StepResult<T>,
                "durable: a step's result type needs to_json and from_json. Declare "
                "NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Type, field, ...) beside the type (or to_json "
                "and from_json in its namespace), or return durable::json");
  return StepResult<T>;
}

/// The context of the attempt whose body this thread runs (the engine sets it).
StepContext& current_step_context();

/// A body declared to take a StepContext& (`[&](durable::StepContext& ctx) { ... }`).
template <class F>
constexpr bool takes_context = std::is_invocable_v<std::unwrap_reference_t<F>&, StepContext&>;

/// Calls a body with the attempt's context when it takes one.
template <class F>
decltype(auto) call_with_context(F& fn) {
  if constexpr (takes_context<F>) {
    return fn(current_step_context());
  } else {
    return fn();
  }
}

/// What a body returns, whichever way it is called.
template <class F>
using body_result_t = decltype(call_with_context(std::declval<F&>()));

template <class T, class F>
TransactionBody make_transaction_body(F&& fn) {
  return [fn = std::forward<F>(fn)](Sql& sql) mutable -> json {
    if constexpr (std::is_void_v<T>) {
      fn(sql);
      return nullptr;
    } else {
      return detail::to_value(T(fn(sql)));
    }
  };
}

template <class T, class F>
Body make_body(F&& fn) {
  // Held in a shared_ptr so that move-only callables fit in a std::function.
  auto owned = std::make_shared<std::decay_t<F>>(std::forward<F>(fn));
  return [owned]() -> json {
    if constexpr (std::is_void_v<T>) {
      call_with_context(*owned);
      return nullptr;
    } else {
      return detail::to_value(T(call_with_context(*owned)));
    }
  };
}
}  // namespace detail

template <class T>
class Future;

/// The step tools of one invocation of a run. A workflow function receives a Step& and uses it
/// from its own code; a step body may use run() and start() too (nested steps). Not to be kept
/// past the workflow call.
///
/// Step ids name journal entries. They are matched by id, not position: reusing an id in one
/// run is legal and its n-th use gets the key "id#n" (n >= 2), in call order. A step run inside
/// another step's body is keyed by its path, "outer/inner". The items of map("id", ...) are
/// keyed "id[0]", "id[1]", .... Ids must be non-empty and must not contain '/', '#', '[' or ']',
/// which durable reserves for these keys.
class Step {
 public:
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  /// Runs fn() once per run and returns its result (T = fn's return type, or void). If the
  /// journal holds a result for this id, returns it without calling fn. Otherwise runs fn (with
  /// every started step not yet journaled, concurrently), journals the results and ends the
  /// invocation; the runtime then invokes the workflow again.
  /// T converts to and from JSON through nlohmann's to_json/from_json; text returned as a
  /// const char* or std::string_view comes back as a std::string.
  ///
  /// Throws StepFailed for a step that failed for good (in the invocation whose last attempt
  /// failed, and on every replay after); Error when the journaled result no longer converts to
  /// T, or the id is not a valid step id; NonDeterminism when the id was journaled as another
  /// kind of step. An exception out of fn is one failed attempt: retried per opts.retry, else
  /// the workflow's policy, else RetryPolicy{}. NonRetryableError fails the step at once;
  /// RetryAfterError sets the next delay.
  ///
  /// Called inside a step body, runs a nested step: keyed "outer/id", journaled on its own when
  /// it completes, and memoized when the outer step is retried.
  ///
  /// fn may take a durable::StepContext& instead of nothing: its attempt's stop token,
  /// heartbeats and the progress earlier attempts reported (opts.timeout, heartbeat_timeout).
  template <class F>
  auto run(std::string_view id, F&& fn, StepOptions opts = {},
           detail::SourceLocation where = detail::SourceLocation::current());

  /// Runs fn(sql) once per run, inside the very transaction that journals the step, and returns
  /// its result as run() does: the application's writes through `sql` (a durable::Sql on the
  /// store's own connection: SQLite's file, PostgreSQL's database) and the step's journal entry
  /// commit together or not at all, so a crash can never apply them twice. An exception out of
  /// fn rolls its writes back and is one failed attempt, retried per opts.retry. Called from the
  /// workflow function, not inside another step's body (Error). opts.timeout does not apply.
  template <class F>
  auto transaction(std::string_view id, F&& fn, StepOptions opts = {},
                   detail::SourceLocation where = detail::SourceLocation::current());

  /// Starts fn() as a step that runs in parallel with the other started steps, and returns a
  /// Future for its result (a fn taking a durable::Sql& starts a transaction step: see
  /// transaction()). Nothing runs until the workflow waits: get() or ready()-then-get(),
  /// all(), map(), a new run(), a sleep, or the workflow's return. Then every started step not
  /// yet journaled runs, concurrently on the step threads, and all of them are journaled before
  /// the next invocation. Keys follow the order of the start() calls, not of completion.
  template <class F>
  auto start(std::string_view id, F&& fn, StepOptions opts = {},
             detail::SourceLocation where = detail::SourceLocation::current());

  /// Starts fn(item) for each item as a parallel step keyed "id[0]", "id[1]", ... and returns
  /// the results in item order (nothing for a void fn). A failed item throws its StepFailed.
  template <class Range, class F>
  auto map(std::string_view id, const Range& items, F&& fn, StepOptions opts = {},
           detail::SourceLocation where = detail::SourceLocation::current());

  /// Sleeps the run for d: journals the wake time and ends the invocation; the run is sleeping,
  /// holding no thread, until then. On replay after the wake time, returns at once. Rounded up
  /// to whole milliseconds; throws Error for a duration over 30,000 years or not a number.
  template <class Rep, class Period>
  void sleep(std::string_view id, std::chrono::duration<Rep, Period> d,
             detail::SourceLocation where = detail::SourceLocation::current()) {
    detail::note_call(where);
    // Through double milliseconds: no duration (hours::max() included) can overflow on the way.
    sleep_for(id, std::chrono::duration<double, std::milli>(d));
  }
  /// As above with a duration in text: "30s", "90 seconds", "1 hour", "2 hours", "1 day",
  /// "1h30m", "500ms". Throws Error for text that is not a duration.
  void sleep(std::string_view id, std::string_view d,
             detail::SourceLocation where = detail::SourceLocation::current());
  /// Sleeps the run until t (returns at once on the next invocation if t has passed).
  void sleep_until(std::string_view id, Clock::time_point t,
                   detail::SourceLocation where = detail::SourceLocation::current());

  /// Waits for an event with this name sent after the wait began (by Runtime::send_event or a
  /// step's send_event, in any process) whose data holds the fields of opts.match with equal
  /// values, and returns its data; nullopt when opts.timeout passes first. The run is waiting,
  /// holding no thread, meanwhile. The event is journaled: replays return the same data.
  std::optional<json> wait_for_event(
      std::string_view id, std::string_view event, WaitOptions opts = {},
      detail::SourceLocation where = detail::SourceLocation::current());
  /// Takes the oldest message on `topic` of this run's mailbox (Runtime::send) not yet received,
  /// and returns it; nullopt when `timeout` passes first (milliseconds::max(): no timeout).
  /// A message sent before the receive began is kept for it. The run is waiting, holding no
  /// thread, meanwhile. Journaled: each message is received once, in the order sent, and
  /// replays return the same one. Workflow code only (a step body's call throws Error). Throws
  /// Error for a topic that is empty, over 200 bytes, or holds '/' or a control character, and
  /// for a negative timeout.
  std::optional<json> receive(std::string_view id, std::string_view topic,
                              std::chrono::milliseconds timeout = std::chrono::milliseconds::max(),
                              detail::SourceLocation where = detail::SourceLocation::current());
  /// Sends an event (see Runtime::send_event), once: the send is journaled with the event, and
  /// replays do not send it again. Throws Error for data that cannot be stored.
  void send_event(std::string_view id, std::string_view event, json data = json::object(),
                  detail::SourceLocation where = detail::SourceLocation::current());
  /// Starts a run of another workflow with this input (once: the child's id is journaled, and
  /// the child records this run as its parent), waits for it without holding a thread, and
  /// returns its output. A child that failed or was cancelled throws StepFailed here. Cancelling
  /// this run cancels the child. The workflow must be added to the runtime running this one.
  json invoke(std::string_view id, std::string_view workflow, json input = json::object(),
              detail::SourceLocation where = detail::SourceLocation::current());

  /// Publishes `value` as the run's latest value of `key`, for Runtime::published, Client and
  /// `GET /v1/runs/{id}/published/{key}` to read while the run goes on and after it ends
  /// (docs/messaging.md). Journaled at its place like a step: a replay does not publish again,
  /// and a later publish of the same key replaces the value. Throws Error for a key that is
  /// empty, longer than 200 bytes, or holds '/' or a control character, and for a value whose
  /// JSON text is larger than max_output_bytes. Not callable inside a step body.
  void publish(std::string_view key, json value,
               detail::SourceLocation where = detail::SourceLocation::current());

  /// Merges `tags` into the run's tags (StartOptions::tags), which RunFilter::tags, `durable
  /// runs --tag` and `GET /v1/runs?tag.KEY=VALUE` filter on: a key the run has takes the new
  /// value. Journaled at its place like a step: a replay does not set them again. Throws Error
  /// for an empty key or value, one longer than 256 bytes or not UTF-8, more than 32 tags, or
  /// tags that would give the run more than 32 in all. Not callable inside a step body.
  void set_tags(std::map<std::string, std::string> tags,
                detail::SourceLocation where = detail::SourceLocation::current());

  /// Appends `value` to the run's stream `stream`, for Runtime::read_stream, Client and the
  /// Server-Sent Events of `GET /v1/runs/{id}/streams/{name}` (docs/messaging.md). From the
  /// workflow function it is journaled at its place: each value appears once, however often the
  /// run replays. From inside a step body it is written at once, readable before the body ends
  /// (tokens as a model produces them); a retried attempt may write again. Throws Error for a
  /// name that is empty, longer than 200 bytes, or holds '/' or a control character, for a value
  /// whose JSON text is larger than max_output_bytes, and for a stream already closed. Not
  /// callable inside the body of a step.transaction.
  void write_stream(std::string_view stream, json value,
                    detail::SourceLocation where = detail::SourceLocation::current());
  /// Closes the stream: readers get what was written and learn nothing more comes. Closing a
  /// closed stream does nothing. The run's end closes every stream it has.
  void close_stream(std::string_view stream,
                    detail::SourceLocation where = detail::SourceLocation::current());

  /// Changing the code of running runs (docs/versioning.md). True in a run that reaches this
  /// call with nothing journaled past it (a new run, or one that got no further on older code):
  /// the new path; a marker is journaled, so every replay of the run says true again. False in a
  /// run whose journal holds entries, without the marker, that no call has met by here: it got
  /// further on code without the patch and keeps to the old path; nothing is journaled. (An
  /// entry of a step the code no longer calls counts too.) The id names the patch alone: a step
  /// of the run using it too is an Error. Not callable inside a step body.
  bool patched(std::string_view id,
               detail::SourceLocation where = detail::SourceLocation::current());
  /// The patch's old path is gone from the code: a run holding the patch's marker meets it
  /// here, others go on. A run whose journal goes on past this call without the marker began on
  /// code older than the patch and fails with NonDeterminism. Once no run holds the marker,
  /// remove the call.
  void deprecate_patch(std::string_view id,
                       detail::SourceLocation where = detail::SourceLocation::current());

  /// Ends this run as completed (no output; RunInfo::continued_as names its successor) and
  /// starts a new run of the same workflow with `input`, a fresh journal and the same
  /// correlation id, in the one transaction that ends this run: a workflow that loops forever
  /// (a poller, a daily digest) keeps its journal, and so the cost of its replays, bounded.
  /// Steps started and not awaited complete first. A child run that continues as new answers its
  /// parent when the last run of its line ends. Throws Error, starting nothing, for an input the
  /// workflow cannot take or whose JSON text is larger than max_output_bytes. Not callable
  /// inside a step body.
  [[noreturn]] void continue_as_new(
      json input, detail::SourceLocation where = detail::SourceLocation::current());

  /// The time by the runtime's clock, journaled at the first call: every replay of the run gets
  /// that same time back (a Clock::now() in workflow code would differ on each replay).
  /// Milliseconds. Journaled before the call returns, like every step.
  Clock::time_point now(std::string_view id,
                        detail::SourceLocation where = detail::SourceLocation::current());
  /// A version 4 UUID ("0f8e...-4...-8...") journaled at the first call and given back on every
  /// replay: an idempotency key for a call a step makes. From the runtime's generator, not a
  /// cryptographic one: not for secrets.
  std::string uuid(std::string_view id,
                   detail::SourceLocation where = detail::SourceLocation::current());
  /// 64 random bits, journaled at the first call and given back on every replay (as uuid, not
  /// for secrets).
  std::uint64_t random(std::string_view id,
                       detail::SourceLocation where = detail::SourceLocation::current());

  /// The id of the run this invocation belongs to.
  std::string_view run_id() const;
  /// The run's correlation id, from start() or generated.
  std::string_view correlation_id() const;
  /// A W3C `traceparent` for a call this run makes to another service, so that the callee's
  /// spans join the run's trace: inside a step body, under the span of the body's attempt;
  /// elsewhere, under the run's span. The same on every replay.
  std::string traceparent() const;
  /// True while this invocation re-executes code whose steps the journal already holds: from the
  /// top of the function until the first step that is not journaled.
  bool replaying() const;

 private:
  friend class detail::Invocation;
  template <class T>
  friend class Future;
  explicit Step(detail::Invocation& invocation) : invocation_(&invocation) {}

  // The non-template halves of the step tools, in src/step.cpp.
  const json* begin_run(std::string_view id, const StepOptions& opts);
  // run_new() and await() give the step's value, or nullptr where the invocation ends: then
  // end_invocation() unwinds the workflow, called here, where no frame of durable's is left with
  // a destructor for the unwinder to run.
  const json* run_new(detail::Body body);
  const json* begin_transaction(std::string_view id, const StepOptions& opts);
  const json* run_transaction(detail::TransactionBody body);
  std::size_t start_step(std::string_view id, const StepOptions& opts, detail::Body body,
                         std::optional<std::size_t> item);
  std::size_t start_transaction(std::string_view id, const StepOptions& opts,
                                detail::TransactionBody body);
  template <class F>
  auto start_body(std::string_view id, F&& fn, const StepOptions& opts);
  const json* await(std::size_t slot);
  [[noreturn]] void end_invocation();
  bool ready(std::size_t slot) const;
  [[noreturn]] void bad_conversion(const json& value, std::string_view type,
                                   const std::exception& error);
  void sleep_for(std::string_view id, std::chrono::duration<double, std::milli> d);
  template <class T, class Range, class F>
  auto map_items(std::string_view id, const Range& items, F&& fn, const StepOptions& opts);

  template <class T>
  T convert(const json& value) {
    try {
      return detail::from_value<T>(value);
    } catch (const json::exception& e) {
      bad_conversion(value, detail::type_name<T>(), e);
    }
  }

  detail::Invocation* invocation_;
};

/// The result of a started step. get() waits for it (see Step::start) and returns its value or
/// throws its StepFailed; ready() says whether get() would return without waiting. A Future
/// belongs to the invocation that made it: do not keep it past the workflow call.
template <class T>
class Future {
 public:
  T get() {
    const json* value = step_->await(slot_);
    if (value == nullptr) step_->end_invocation();
    if constexpr (!std::is_void_v<T>) return step_->template convert<T>(*value);
  }
  bool ready() const { return step_->ready(slot_); }

 private:
  friend class Step;
  Future(Step& step, std::size_t slot) : step_(&step), slot_(slot) {}
  Step* step_;
  std::size_t slot_;
};

/// Waits for all the futures (their steps run concurrently) and returns their values in order.
/// A step that failed for good throws its StepFailed. For a Future<void>, wait with get().
template <class... T>
auto all(Future<T>&... futures) {
  // The return type is not spelled out: std::tuple<void> would be the first error, not this one.
  static_assert(!(std::is_void_v<T> || ...),
                "durable::all takes no Future<void>: call get() on each of those futures instead "
                "(all() returns the values of futures that have one)");
  if constexpr (!(std::is_void_v<T> || ...)) return std::tuple<T...>{futures.get()...};
}

template <class F>
auto Step::run(std::string_view id, F&& fn, StepOptions opts, detail::SourceLocation where) {
  static_assert(std::is_invocable_v<F&> || detail::takes_context<std::decay_t<F>>,
                "durable: step.run(id, fn) calls fn with no arguments, or with a "
                "durable::StepContext&: write [&] { ... } or "
                "[&](durable::StepContext& ctx) { ... }");
  using T = detail::step_result_t<std::decay_t<detail::body_result_t<std::decay_t<F>>>>;
  if constexpr (detail::check_step_result<T>()) {
    detail::note_call(where);
    const json* memo = begin_run(id, opts);
    if (memo == nullptr) memo = run_new(detail::make_body<T>(std::ref(fn)));
    if (memo == nullptr) end_invocation();
    if constexpr (!std::is_void_v<T>) return convert<T>(*memo);
  }
}

template <class F>
auto Step::transaction(std::string_view id, F&& fn, StepOptions opts,
                       detail::SourceLocation where) {
  static_assert(std::is_invocable_v<F&, Sql&>,
                "durable: step.transaction(id, fn) calls fn with a durable::Sql&: write "
                "[&](durable::Sql& sql) { ... }");
  using T = detail::step_result_t<std::decay_t<std::invoke_result_t<F&, Sql&>>>;
  if constexpr (detail::check_step_result<T>()) {
    detail::note_call(where);
    const json* memo = begin_transaction(id, opts);
    if (memo == nullptr) memo = run_transaction(detail::make_transaction_body<T>(std::ref(fn)));
    if (memo == nullptr) end_invocation();
    if constexpr (!std::is_void_v<T>) return convert<T>(*memo);
  }
}

template <class F>
auto Step::start(std::string_view id, F&& fn, StepOptions opts, detail::SourceLocation where) {
  if constexpr (std::is_invocable_v<F&, Sql&>) {  // a transaction step, started
    using T = detail::step_result_t<std::decay_t<std::invoke_result_t<F&, Sql&>>>;
    if constexpr (detail::check_step_result<T>()) {
      detail::note_call(where);
      return Future<T>(*this, start_transaction(id, opts, detail::make_transaction_body<T>(
                                                             std::forward<F>(fn))));
    }
  } else {
    return start_body(id, std::forward<F>(fn), opts);
  }
}

template <class F>
auto Step::start_body(std::string_view id, F&& fn, const StepOptions& opts) {
  static_assert(std::is_invocable_v<F&> || detail::takes_context<std::decay_t<F>>,
                "durable: step.start(id, fn) calls fn with no arguments, or with a "
                "durable::StepContext&: write [&] { ... } or "
                "[&](durable::StepContext& ctx) { ... }");
  using T = detail::step_result_t<std::decay_t<detail::body_result_t<std::decay_t<F>>>>;
  if constexpr (detail::check_step_result<T>()) {
    return Future<T>(*this, start_step(id, opts, detail::make_body<T>(std::forward<F>(fn)), {}));
  }
}

template <class Range, class F>
auto Step::map(std::string_view id, const Range& items, F&& fn, StepOptions opts,
               detail::SourceLocation where) {
  using Item = std::decay_t<decltype(*std::begin(items))>;
  constexpr bool with_context = std::is_invocable_v<F&, const Item&, StepContext&>;
  static_assert(std::is_invocable_v<F&, const Item&> || with_context,
                "durable: step.map(id, items, fn) calls fn with one item (and a "
                "durable::StepContext&, if it takes one): write [&](const Item& item) { ... }");
  using R = std::conditional_t<with_context, std::invoke_result<F&, const Item&, StepContext&>,
                               std::invoke_result<F&, const Item&>>;
  using T = detail::step_result_t<std::decay_t<typename R::type>>;
  if constexpr (detail::check_step_result<T>()) {
    detail::note_call(where);
    return map_items<T>(id, items, std::forward<F>(fn), opts);
  }
}

template <class T, class Range, class F>
auto Step::map_items(std::string_view id, const Range& items, F&& fn, const StepOptions& opts) {
  using Item = std::decay_t<decltype(*std::begin(items))>;
  auto shared = std::make_shared<std::decay_t<F>>(std::forward<F>(fn));
  std::vector<Future<T>> futures;
  std::size_t index = 0;
  for (const auto& item : items) {
    auto body = [&] {
      if constexpr (std::is_invocable_v<std::decay_t<F>&, const Item&, StepContext&>) {
        return detail::make_body<T>(
            [shared, item](StepContext& context) { return (*shared)(item, context); });
      } else {
        return detail::make_body<T>([shared, item] { return (*shared)(item); });
      }
    }();
    futures.push_back(Future<T>(*this, start_step(id, opts, std::move(body), index++)));
  }
  if constexpr (std::is_void_v<T>) {
    for (auto& future : futures) future.get();
  } else {
    std::vector<T> results;
    results.reserve(futures.size());
    for (auto& future : futures) results.push_back(future.get());
    return results;
  }
}

}  // namespace durable
