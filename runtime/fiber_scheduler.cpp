#include "fiber_scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define DURABLE_ASAN_FIBERS 1
#endif
#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer's fiber interface deadlocked inside its own runtime here (GCC 12's libtsan):
// under TSan, tasks run one after another on the calling thread, without fibers.
#define DURABLE_NO_FIBERS 1
#endif

namespace durable::detail {

namespace ctx = boost::context;

namespace {
constexpr std::size_t kStackSize = 256 * 1024;  // per executing run; a guard page below it
thread_local FiberScheduler* t_current = nullptr;
}  // namespace

// One task's fiber, its way back to the scheduler, and what the sanitizers need to follow the
// stack switches.
struct FiberScheduler::Task {
  std::function<void()>* fn = nullptr;
  ctx::fiber self;  // resumes the task
  ctx::fiber back;  // resumes the scheduler, from inside the task
  std::exception_ptr error;
  bool done = false;
  std::chrono::steady_clock::time_point wake_at;
  ctx::stack_context stack;
#if DURABLE_ASAN_FIBERS
  void* fake_stack = nullptr;
  const void* scheduler_bottom = nullptr;
  std::size_t scheduler_size = 0;
#endif
};

FiberScheduler* FiberScheduler::current() { return t_current; }

bool FiberScheduler::uses_fibers() {
#if DURABLE_NO_FIBERS
  return false;
#else
  return true;
#endif
}

void FiberScheduler::run(std::vector<std::function<void()>>& fns) {
#if DURABLE_NO_FIBERS
  for (auto& fn : fns) fn();
  return;
#endif
  std::vector<std::unique_ptr<Task>> tasks;
  for (auto& fn : fns) {
    auto task = std::make_unique<Task>();
    task->fn = &fn;
    ctx::protected_fixedsize_stack allocator(kStackSize);
    task->stack = allocator.allocate();
    Task* t = task.get();
    t->self = ctx::fiber(
        std::allocator_arg, ctx::preallocated(t->stack.sp, t->stack.size, t->stack), allocator,
        [this, t](ctx::fiber&& back) {
#if DURABLE_ASAN_FIBERS
          __sanitizer_finish_switch_fiber(nullptr, &t->scheduler_bottom, &t->scheduler_size);
#endif
          t->back = std::move(back);
          try {
            (*t->fn)();
          } catch (...) {
            t->error = std::current_exception();
          }
          t->done = true;
#if DURABLE_ASAN_FIBERS
          __sanitizer_start_switch_fiber(nullptr, t->scheduler_bottom, t->scheduler_size);
#endif
          return std::move(t->back);
        });
    ready_.push_back(t);
    tasks.push_back(std::move(task));
  }
  alive_ = tasks.size();
  FiberScheduler* outer = t_current;
  t_current = this;
  while (alive_ > 0) {
    if (ready_.empty() && idle_hook_ && idle_hook_()) continue;
    if (ready_.empty()) {
      // Wait for a step thread to finish a batch, or for the first sleeper's time.
      std::unique_lock lock(mutex_);
      waiting_ = true;
      const auto has_woken = [this] { return !woken_.empty(); };
      if (sleeping_.empty()) {
        woken_cv_.wait(lock, has_woken);
      } else {
        auto until = sleeping_.front()->wake_at;
        for (Task* s : sleeping_) until = std::min(until, s->wake_at);
        woken_cv_.wait_until(lock, until, has_woken);
      }
      waiting_ = false;
      for (Task* w : woken_) ready_.push_back(w);
      woken_.clear();
      const auto now = std::chrono::steady_clock::now();
      for (auto it = sleeping_.begin(); it != sleeping_.end();) {
        if ((*it)->wake_at <= now) {
          ready_.push_back(*it);
          it = sleeping_.erase(it);
        } else {
          ++it;
        }
      }
      continue;
    }
    Task* task = ready_.front();
    ready_.pop_front();
    switch_to(*task);
    {
      std::lock_guard lock(mutex_);  // waits finished meanwhile join the ready ones
      for (Task* w : woken_) ready_.push_back(w);
      woken_.clear();
    }
    if (task->done) {
      --alive_;
    }
  }
  t_current = outer;
  std::exception_ptr first;
  for (auto& task : tasks) {
    if (task->error && !first) first = task->error;
  }
  if (first) std::rethrow_exception(first);
}

void FiberScheduler::switch_to(Task& task) {
  running_ = &task;
#if DURABLE_ASAN_FIBERS
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, static_cast<char*>(task.stack.sp) - task.stack.size,
                                 task.stack.size);
#endif
  task.self = std::move(task.self).resume();
#if DURABLE_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  running_ = nullptr;
}

// From inside the running task: back to the scheduler until something makes it ready again.
void FiberScheduler::suspend() {
  Task& task = *running_;
#if DURABLE_ASAN_FIBERS
  __sanitizer_start_switch_fiber(&task.fake_stack, task.scheduler_bottom, task.scheduler_size);
#endif
  task.back = std::move(task.back).resume();
#if DURABLE_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(task.fake_stack, &task.scheduler_bottom, &task.scheduler_size);
#endif
}

void FiberScheduler::wake(Task& task) {
  bool waiting = false;
  {
    std::lock_guard lock(mutex_);
    woken_.push_back(&task);
    waiting = waiting_;
  }
  if (waiting) woken_cv_.notify_one();  // no call while the scheduler is busy running fibers
}

void FiberScheduler::run_bodies(std::vector<std::function<void()>>& bodies) {
  if (running_ == nullptr || t_current != this || alive_ <= 1) {
    pool_->run_all(bodies);  // nothing else to run meanwhile: no hand-off needed
    return;
  }
  Task& task = *running_;
  auto left = std::make_shared<std::atomic<std::size_t>>(bodies.size());
  for (auto& body : bodies) {
    pool_->submit([this, &task, &body, left] {
      body();
      if (left->fetch_sub(1) == 1) wake(task);
    });
  }
  suspend();
}

void FiberScheduler::sleep_until(std::chrono::steady_clock::time_point until) {
  if (running_ == nullptr || t_current != this) {
    std::this_thread::sleep_until(until);
    return;
  }
  running_->wake_at = until;
  sleeping_.push_back(running_);
  suspend();
}

}  // namespace durable::detail
