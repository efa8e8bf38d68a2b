// SPDX-License-Identifier: Apache-2.0
#pragma once
// Workflow code on fibers: many runs' invocations share the thread that called run_until_idle()
// or wait(). A run whose workflow waits for step bodies (or a short in-place sleep) suspends its
// fiber; the others go on, and the bodies run on the step threads meanwhile.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "step_pool.hpp"

namespace durable::detail {

class FiberScheduler {
 public:
  explicit FiberScheduler(StepPool& pool);
  ~FiberScheduler();
  FiberScheduler(const FiberScheduler&) = delete;
  FiberScheduler& operator=(const FiberScheduler&) = delete;

  /// Adds a task, to run on a fiber of its own: before run(), or from the idle hook while it
  /// runs (the worker loop admits runs as step threads come free).
  void spawn(std::function<void()> task);
  /// Runs the tasks on this thread until none is left and the idle hook adds none. The first
  /// exception out of a task is rethrown then. A task's fiber and stack are freed as it returns,
  /// so a scheduler that runs for hours holds only the tasks alive.
  void run();

  /// The scheduler whose fiber is running on this thread, if any.
  static FiberScheduler* current();
  /// False in a ThreadSanitizer build, where tasks run one after another without fibers.
  static bool uses_fibers();
  /// The stacks of returned tasks kept for the next ones, in this process: at most 64, and
  /// none where keeps_stacks() is false.
  static std::size_t kept_stacks();
  /// Whether returned tasks' stacks are kept: with fibers, but not under AddressSanitizer
  /// (GCC's or clang's), whose stack bookkeeping a reused stack could confuse.
  static bool keeps_stacks();

  /// Whether this thread runs one of this scheduler's tasks on a fiber now (run_bodies then
  /// lets the other tasks go on while the bodies run).
  bool on_fiber() const;
  /// From a task: runs the bodies on the step threads and returns when all have returned, while
  /// the other tasks' fibers go on. Alone, or off a fiber, it runs them as StepPool::run_all.
  void run_bodies(std::vector<std::function<void()>>& bodies);
  /// From a task: lets the other tasks go on until `until` (steady clock).
  void sleep_until(std::chrono::steady_clock::time_point until);

  /// Called on the scheduler's thread when no task is ready, before it waits; returns whether
  /// it made a task ready (with make_ready) or spawned one. Group commit and admission run here.
  void set_idle_hook(std::function<bool()> hook) { idle_hook_ = std::move(hook); }
  /// From the idle hook: call it again at `when` (steady clock) if nothing else wakes the
  /// scheduler first. Each wait takes the latest such time set; none: only a task wakes it.
  void recheck_at(std::chrono::steady_clock::time_point when) { recheck_at_ = when; }
  /// From any thread: the scheduler calls its idle hook again soon (new work may be due).
  void poke();
  using Handle = void*;
  /// From a task: the running task, to hand to make_ready() once it may go on.
  Handle running() const { return running_; }
  /// Tasks that have not returned yet.
  std::size_t alive() const { return alive_; }
  /// From a task: it only waits for a body abandoned at its timeout to return, with its run let
  /// go (decide::Linger), and counts for no admission meanwhile; then false.
  void set_lingering(bool lingering) { lingering ? ++lingering_ : --lingering_; }
  /// Tasks alive that do not linger: the runs this scheduler works on.
  std::size_t working() const { return alive_ - lingering_; }
  /// From a task: suspends it until make_ready() is called with its handle.
  void park() { suspend(); }
  /// On the scheduler's thread (the idle hook): lets a parked task go on.
  void make_ready(Handle task) { ready_.push_back(static_cast<Task*>(task)); }

 private:
  struct Task;
  void switch_to(Task& task);
  void suspend();
  void wake(Task& task);

  void wait_for_work();
  void reap(Task* task);

  StepPool* pool_;
  Task* running_ = nullptr;
  std::size_t alive_ = 0;
  std::size_t lingering_ = 0;
  std::vector<std::unique_ptr<Task>> tasks_;  // alive ones only
  std::exception_ptr first_error_;
  std::optional<std::chrono::steady_clock::time_point> recheck_at_;
  bool poked_ = false;  // guarded by mutex_
  std::deque<Task*> ready_;
  std::vector<Task*> sleeping_;
  std::mutex mutex_;  // guards woken_: step threads hand finished waits back through it
  std::condition_variable woken_cv_;
  std::vector<Task*> woken_;
  std::atomic<bool> signalled_{false};  // woken_ is not empty or poked_: read by a spin
  std::size_t in_bodies_ = 0;           // tasks waiting in run_bodies
  std::function<bool()> idle_hook_;
  bool waiting_ = false;  // the scheduler sleeps on woken_cv_
};

}  // namespace durable::detail
