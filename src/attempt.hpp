// SPDX-License-Identifier: Apache-2.0
#pragma once
// One attempt of a step body: its StepContext (stop token, heartbeats, progress), and, under a
// timeout, the thread of its own it runs on while the step thread waits for it until the
// timeout. Private to the engine.

#include <chrono>
#include <condition_variable>
#include <durable/step.hpp>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "engine.hpp"

namespace durable::detail {

class Attempt;

/// Holds the write locks of an attempt and of each attempt it is nested in that can be
/// abandoned, outermost first: while held, none of them is abandoned (abandoning one waits), so
/// a body may touch its invocation's state and write. Holds nothing, and is false, when one of
/// them is abandoned already: the body's work is dropped from then on.
class LiveHold {
 public:
  explicit LiveHold(Attempt* innermost);
  explicit operator bool() const { return live_; }

 private:
  std::vector<std::unique_lock<std::mutex>> locks_;
  bool live_ = true;
};

class Attempt {
 public:
  /// `parent`: the attempt whose body runs this one's step (a nested step), if any.
  Attempt(Host& host, std::string key, int attempt, const StepOptions& options,
          std::size_t max_progress_bytes, bool timed, Attempt* parent);
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  /// Runs one attempt: `call` calls the body (through Host::call_body, in a BodyScope). Inline
  /// on this thread with no timeout; with one, on a thread of its own, waited for until the
  /// timeout or the heartbeat timeout passes: then the attempt is abandoned (its stop token
  /// requested) and TimeoutError is thrown while the body goes on. `abandoned` then holds the
  /// attempt: the body may use frames of the workflow's and of the engine's, so the invocation
  /// waits for it before it unwinds them.
  template <class Call>
  static json run(Host& host, const std::string& key, int attempt, const StepOptions& options,
                  std::size_t max_progress_bytes, Attempt* parent, Call&& call,
                  std::shared_ptr<Attempt>& abandoned) {
    if (!timed(options)) {
      Attempt here(host, key, attempt, options, max_progress_bytes, false, parent);
      return here.run_here(std::forward<Call>(call));
    }
    auto self =
        std::make_shared<Attempt>(host, key, attempt, options, max_progress_bytes, true, parent);
    return self->wait_for(self, std::function<json()>(std::forward<Call>(call)), abandoned);
  }
  /// Whether an attempt with these options runs on a thread of its own.
  static bool timed(const StepOptions& options);

  /// Whether the body of an abandoned attempt has returned; wait_ended() waits until it has.
  bool ended() const;
  void wait_ended();
  /// Held while a body writes or touches its invocation's state (see LiveHold): not owning the
  /// lock once the attempt is abandoned.
  std::unique_lock<std::mutex> hold_if_live();
  /// The attempt whose body runs on this thread, if any.
  static Attempt* current();
  StepContext& context() { return context_; }

  // StepContext's calls, from the body's thread.
  std::stop_token stop_token() const { return stop_.get_token(); }
  void heartbeat(json progress);
  std::optional<json> last_heartbeat();
  int number() const { return attempt_; }
  const Host* host() const { return host_; }
  const std::string& key() const { return key_; }

 private:
  template <class Call>
  json run_here(Call&& call) {
    struct Current {
      Attempt* outer = current();
      explicit Current(Attempt* attempt) { set_current(attempt); }
      ~Current() { set_current(outer); }
    } here(this);
    json result;
    try {
      result = call();
    } catch (...) {
      save_last();
      throw;
    }
    save_last();
    return result;
  }
  static void set_current(Attempt* attempt);
  friend class LiveHold;
  json wait_for(std::shared_ptr<Attempt> self, std::function<json()> call,
                std::shared_ptr<Attempt>& abandoned);
  // Stores the latest progress once the body ends, unless it is stored already.
  void save_last();
  // Stores the latest progress unless it is stored already (write_mutex_ held; `state` holds
  // mutex_, let go during the write).
  void save_progress(std::unique_lock<std::mutex>& state);

  Host* host_;
  Attempt* parent_;  // outlives this attempt: its body waits for this one's
  bool timed_;       // only a timed attempt can be abandoned
  std::string key_;
  int attempt_;
  std::chrono::milliseconds timeout_, heartbeat_timeout_;
  std::size_t max_progress_bytes_;
  std::stop_source stop_;
  StepContext context_{*this};
  bool reported_ = false;  // the body called heartbeat() (read and written on its thread)

  std::mutex write_mutex_;  // held by a write of the body's, and to abandon the attempt
  bool abandoned_ = false;  // under write_mutex_

  mutable std::mutex mutex_;  // the rest
  std::condition_variable changed_;
  bool ended_ = false;
  std::optional<json> result_;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point last_beat_;
  std::optional<json> progress_;  // this attempt's latest
  bool progress_saved_ = true;    // progress_ is in the store
  std::optional<std::chrono::steady_clock::time_point> saved_at_;
  std::optional<std::optional<json>> earlier_;  // the earlier attempts', once read
};

}  // namespace durable::detail
