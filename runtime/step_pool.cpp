// SPDX-License-Identifier: Apache-2.0
#include "step_pool.hpp"

#include "spin.hpp"

namespace durable::detail {

StepPool::StepPool(std::size_t threads, Env& env) : env_(env) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i)
    threads_.push_back(env_.start_thread([this] { work(); }));
}

StepPool::~StepPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  has_body_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void StepPool::run_all(std::vector<std::function<void()>>& bodies) {
  if (bodies.empty()) return;
  if (bodies.size() == 1) {  // nothing to overlap with: no hand-off to another thread
    bodies.front()();
    return;
  }
  Batch batch{bodies.size()};
  {
    std::lock_guard lock(mutex_);
    for (auto& body : bodies) queue_.push_back({[&body] { body(); }, &batch});
    queued_.store(queue_.size(), std::memory_order_release);
  }
  has_body_.notify_all();
  // Help: run queued bodies (of this batch or another) until this batch is done.
  std::unique_lock lock(mutex_);
  while (batch.left > 0) {
    if (!queue_.empty()) {
      run_front(lock);
    } else {
      done_.wait(lock);
    }
  }
}

void StepPool::submit(std::function<void()> body) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(body), nullptr});
    queued_.store(queue_.size(), std::memory_order_release);
    // A busy worker takes it from the queue without a wake-up call, and so does a spinning one
    // if it is the only body it would find there.
    const std::size_t spinners = spinning_.load() ? 1 : 0;
    wake = idle_ > 0 && queue_.size() > spinners;
  }
  if (wake) has_body_.notify_one();
}

std::size_t StepPool::free_threads() {
  std::lock_guard lock(mutex_);
  const std::size_t taken = running_ + queue_.size();  // a thread not started yet is free too
  return taken < threads_.size() ? threads_.size() - taken : 0;
}

void StepPool::finish(Batch* batch) {
  if (batch != nullptr && --batch->left == 0) done_.notify_all();
}

void StepPool::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (queue_.empty() && quick() && !spinning_.exchange(true)) {
      lock.unlock();
      spin_for_body();
      spinning_ = false;
      lock.lock();
    }
    ++idle_;
    has_body_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, and nothing left
    run_front(lock);
  }
}

// Runs the body at the front of the queue with the lock released; called with it held.
void StepPool::run_front(std::unique_lock<std::mutex>& lock) {
  Task task = std::move(queue_.front());
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_release);
  ++running_;
  lock.unlock();
  task.body();
  lock.lock();
  --running_;
  finish(task.batch);
}

// A quick body's thread is about to sleep: the loop that handed it the body is likely to hand
// the run's next one over within a commit's time. Waiting awake for it saves the two context
// switches of a sleep and a wake-up call, which cost more than a quick body itself.
void StepPool::spin_for_body() {
  spin_until(env_, kSpin, [this] { return queued_.load(std::memory_order_acquire) > 0; });
}

}  // namespace durable::detail
