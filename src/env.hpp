// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Env: everything of the world outside the process that the core reads or starts (DESIGN
// §11.3). Time, timed waits, threads and randomness reach src/ and runtime/ only through it, as
// leveldb's storage engine reaches its files and clock only through its Env, so that a test can
// run the whole runtime on a clock of its own and the simulation on virtual time and a seeded
// schedule. tests/check_env.cmake fails the build's tests when code reads a clock, waits on one
// or starts a thread any other way.
//
// The stores' network and file I/O (a PostgreSQL socket's poll, SQLite's busy wait) is theirs:
// it is below the Env, as leveldb's files are.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <durable/options.hpp>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace durable::detail {

class Env {
 public:
  using Steady = std::chrono::steady_clock::time_point;

  virtual ~Env() = default;

  /// The wall clock: what a run records as its times and step.now() journals.
  virtual Clock::time_point now() = 0;
  /// A clock that never goes back: deadlines, pauses and measured durations.
  virtual Steady steady_now() = 0;
  /// Blocks on `cv` (whose mutex `lock` holds) until it is notified or steady_now() reaches
  /// `until`. False when it timed out. May return early, as any wait on a condition variable.
  virtual bool wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                          Steady until) = 0;
  /// Blocks the calling thread until steady_now() reaches `until`.
  virtual void sleep_until(Steady until) = 0;
  /// Starts a thread running `body`.
  virtual std::thread start_thread(std::function<void()> body) = 0;
  /// A uniformly random 64-bit number (ids, seeds of the retry jitter). Thread-safe.
  virtual std::uint64_t random() = 0;

  /// The process's real world: the system clocks, std::thread and std::random_device.
  static Env& system();

  std::int64_t now_ms();
  /// A new id: time-ordered (the wall clock's milliseconds) and random, 28 hex digits.
  std::string new_id();

  /// Waits as wait_until() until `ready()` or the deadline: what ready() says at the end.
  template <class Ready>
  bool wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Steady until,
                  Ready ready) {
    while (!ready()) {
      if (!wait_until(cv, lock, until)) return ready();
    }
    return true;
  }
  template <class Rep, class Period, class Ready>
  bool wait_for(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                std::chrono::duration<Rep, Period> d, Ready ready) {
    return wait_until(cv, lock, steady_now() + deadline_of(d), ready);
  }
  template <class Rep, class Period>
  void sleep_for(std::chrono::duration<Rep, Period> d) {
    sleep_until(steady_now() + deadline_of(d));
  }

 private:
  // A duration as steady time, with one that does not fit standing for "never".
  template <class Rep, class Period>
  static std::chrono::steady_clock::duration deadline_of(std::chrono::duration<Rep, Period> d) {
    using Ticks = std::chrono::steady_clock::duration;
    constexpr std::chrono::hours kCentury{24 * 365 * 100};
    // Compared as floating point: a century does not fit every duration type.
    if (std::chrono::duration<double>(d) >= std::chrono::duration<double>(kCentury)) {
      return std::chrono::duration_cast<Ticks>(kCentury);
    }
    return std::chrono::duration_cast<Ticks>(d);
  }
};

/// The system's world, with a wall clock that stands still until advance() or set() moves it:
/// the test kit's virtual clock, and the tests' ManualClock. Safe to read from the runtime's
/// threads while a test moves it.
class ManualClockEnv final : public Env {
 public:
  explicit ManualClockEnv(Clock::time_point start) : ticks_(start.time_since_epoch().count()) {}

  Clock::time_point now() override { return Clock::time_point(Clock::duration(ticks_.load())); }
  Steady steady_now() override { return system().steady_now(); }
  bool wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                  Steady until) override {
    return system().wait_until(cv, lock, until);
  }
  void sleep_until(Steady until) override { system().sleep_until(until); }
  std::thread start_thread(std::function<void()> body) override {
    return system().start_thread(std::move(body));
  }
  std::uint64_t random() override { return system().random(); }

  void advance(Clock::duration d) { ticks_ += d.count(); }
  void set(Clock::time_point t) { ticks_ = t.time_since_epoch().count(); }

  using Env::wait_until;

 private:
  std::atomic<Clock::rep> ticks_;
};

}  // namespace durable::detail
