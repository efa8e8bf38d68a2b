// SPDX-License-Identifier: Apache-2.0
#pragma once
// The step threads: a fixed pool that runs step bodies.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "env.hpp"

namespace durable::detail {

/// A fixed set of threads running step bodies. run_all() runs a batch and returns when every
/// body of it has returned; the calling thread works on queued bodies meanwhile, so a body that
/// itself runs a batch (nested parallel steps) cannot starve the pool.
class StepPool {
 public:
  /// threads: 0 means one per core.
  /// `env` starts the threads and outlives the pool.
  StepPool(std::size_t threads, Env& env);
  Env& env() { return env_; }
  ~StepPool();
  StepPool(const StepPool&) = delete;
  StepPool& operator=(const StepPool&) = delete;

  /// Runs the bodies concurrently. A body must not throw.
  void run_all(std::vector<std::function<void()>>& bodies);
  /// Queues one body and returns at once; it must not throw.
  void submit(std::function<void()> body);
  std::size_t size() const { return threads_.size(); }
  /// Threads waiting for a body that no queued body will take: what a new body would start on
  /// at once.
  std::size_t free_threads();

  /// Whether bodies lately ended within microseconds to milliseconds. While they do, a hand-off
  /// is worth a short spin instead of a sleep and a wake-up call: one step thread that ends a
  /// body spins for the next one (kSpin), and the fiber scheduler waiting for a body spins for
  /// its end.
  void set_quick(bool quick) { quick_.store(quick, std::memory_order_relaxed); }
  bool quick() const { return quick_.load(std::memory_order_relaxed); }
  /// How long a spin for a hand-off lasts before the thread sleeps: about what a journal commit
  /// at Durability::normal and the workflow code between two steps take here.
  static constexpr std::chrono::microseconds kSpin{200};

 private:
  struct Batch {
    std::size_t left;
  };
  struct Task {
    std::function<void()> body;
    Batch* batch;  // null for a submitted body
  };
  void work();
  void finish(Batch* batch);
  void run_front(std::unique_lock<std::mutex>& lock);
  void spin_for_body();

  Env& env_;
  std::mutex mutex_;
  std::condition_variable has_body_, done_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::size_t idle_ = 0;     // workers waiting for a body
  std::size_t running_ = 0;  // bodies running (on the workers, or a thread helping in run_all)
  std::vector<std::thread> threads_;
  std::atomic<bool> quick_{false};
  std::atomic<bool> spinning_{false};   // one step thread at most spins (the cores are few)
  std::atomic<std::size_t> queued_{0};  // queue_.size(), read without the lock by a spinner
};

}  // namespace durable::detail
