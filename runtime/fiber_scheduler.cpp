// SPDX-License-Identifier: Apache-2.0
#include "fiber_scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "spin.hpp"

// GCC says it builds with ASan by __SANITIZE_ADDRESS__, Debian's clang 14 and 16 only by
// __has_feature. Stack switches ASan is not told of make it report errors that are not there.
#if defined(__SANITIZE_ADDRESS__)
#define DURABLE_ASAN_FIBERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DURABLE_ASAN_FIBERS 1
#endif
#endif
#if DURABLE_ASAN_FIBERS
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
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

// The stacks of returned tasks, kept for the next ones: a run's fiber then costs no mmap, guard
// page mprotect and munmap, nor the page faults of a fresh stack's first use. At most as many
// are kept as a loop holds runs at once (RuntimeCore::kClaimBatch); the pages a task touched
// stay resident meanwhile. Not under AddressSanitizer, whose stack bookkeeping a reused stack
// could confuse.
class StackCache {
 public:
  // Never destroyed: a fiber may end on a thread still running while the process exits.
  static StackCache& instance() {
    static StackCache* const cache = new StackCache;
    return *cache;
  }
  StackCache() { kept_.reserve(kKept); }
  ctx::stack_context take() {
    {
      std::lock_guard lock(mutex_);
      if (!kept_.empty()) {
        const ctx::stack_context stack = kept_.back();
        kept_.pop_back();
        return stack;
      }
    }
    return ctx::protected_fixedsize_stack(kStackSize).allocate();
  }
  std::size_t kept() {
    std::lock_guard lock(mutex_);
    return kept_.size();
  }
  void give(ctx::stack_context& stack) {
#if DURABLE_ASAN_FIBERS
    // A fiber never returns from the frames it switched out of last (boost::context's entry,
    // the task's lambda), so their redzones and ended scopes stay marked in ASan's shadow, and
    // unmapping the stack does not clear them. Whatever is mapped at those addresses next would
    // read as poisoned: another fiber's stack (a stack-buffer-overflow at its first throw, in
    // __asan_handle_no_return) or SQLite's mapping of a -shm file (a stack-use-after-scope in
    // its memset of the WAL index), both seen in CI. The stack leaves no marks behind.
    __asan_unpoison_memory_region(static_cast<char*>(stack.sp) - stack.size, stack.size);
#else
    {
      std::lock_guard lock(mutex_);
      if (kept_.size() < kKept) {
        kept_.push_back(stack);
        return;
      }
    }
#endif
    ctx::protected_fixedsize_stack(kStackSize).deallocate(stack);
  }

 private:
  static constexpr std::size_t kKept = 64;
  std::mutex mutex_;
  std::vector<ctx::stack_context> kept_;
};

// boost::context's StackAllocator over the cache.
struct CachedStack {
  ctx::stack_context allocate() { return StackCache::instance().take(); }
  void deallocate(ctx::stack_context& stack) noexcept { StackCache::instance().give(stack); }
};
}  // namespace

// One task's fiber, its way back to the scheduler, and what the sanitizers need to follow the
// stack switches.
struct FiberScheduler::Task {
  std::function<void()> fn;
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

FiberScheduler::FiberScheduler(StepPool& pool) : pool_(&pool) {}
FiberScheduler::~FiberScheduler() = default;

FiberScheduler* FiberScheduler::current() { return t_current; }

std::size_t FiberScheduler::kept_stacks() { return StackCache::instance().kept(); }

bool FiberScheduler::uses_fibers() {
#if DURABLE_NO_FIBERS
  return false;
#else
  return true;
#endif
}

bool FiberScheduler::keeps_stacks() {
#if DURABLE_ASAN_FIBERS
  return false;
#else
  return uses_fibers();
#endif
}

void FiberScheduler::spawn(std::function<void()> fn) {
  auto task = std::make_unique<Task>();
  task->fn = std::move(fn);
  Task* t = task.get();
#if !DURABLE_NO_FIBERS
  CachedStack allocator;
  t->stack = allocator.allocate();
  t->self = ctx::fiber(
      std::allocator_arg, ctx::preallocated(t->stack.sp, t->stack.size, t->stack), allocator,
      [t](ctx::fiber&& back) {
#if DURABLE_ASAN_FIBERS
        __sanitizer_finish_switch_fiber(nullptr, &t->scheduler_bottom, &t->scheduler_size);
#endif
        t->back = std::move(back);
        try {
          t->fn();
        } catch (...) {
          t->error = std::current_exception();
        }
        t->done = true;
#if DURABLE_ASAN_FIBERS
        __sanitizer_start_switch_fiber(nullptr, t->scheduler_bottom, t->scheduler_size);
#endif
        return std::move(t->back);
      });
#endif
  ready_.push_back(t);
  tasks_.push_back(std::move(task));
  ++alive_;
}

// A task returned: keep its first error, free its fiber and stack.
void FiberScheduler::reap(Task* task) {
  if (task->error && !first_error_) first_error_ = task->error;
  --alive_;
  const auto it = std::find_if(tasks_.begin(), tasks_.end(),
                               [task](const std::unique_ptr<Task>& t) { return t.get() == task; });
  if (it != tasks_.end()) tasks_.erase(it);
}

void FiberScheduler::run() {
  FiberScheduler* outer = t_current;
  t_current = this;
  struct Restore {
    FiberScheduler* outer;
    ~Restore() { t_current = outer; }
  } restore{outer};
  for (;;) {
    if (ready_.empty() && idle_hook_ && idle_hook_()) continue;
    if (ready_.empty()) {
      if (alive_ == 0) break;
      wait_for_work();
      continue;
    }
    Task* task = ready_.front();
    ready_.pop_front();
#if DURABLE_NO_FIBERS
    // One after another on this thread: a task runs to its end before the next begins.
    try {
      task->fn();
    } catch (...) {
      task->error = std::current_exception();
    }
    task->done = true;
#else
    switch_to(*task);
#endif
    {
      std::lock_guard lock(mutex_);  // waits finished meanwhile join the ready ones
      for (Task* w : woken_) ready_.push_back(w);
      woken_.clear();
      signalled_ = poked_;  // a poke meanwhile still counts
    }
    if (task->done) reap(task);
  }
  if (first_error_) std::rethrow_exception(std::exchange(first_error_, nullptr));
}

// No task is ready: wait for a step thread to finish a batch, the first sleeper's time, the
// idle hook's recheck time or a poke.
void FiberScheduler::wait_for_work() {
  std::optional<std::chrono::steady_clock::time_point> until = std::exchange(recheck_at_, {});
  for (Task* s : sleeping_) until = until ? std::min(*until, s->wake_at) : s->wake_at;
  // Quick bodies on the step threads: their ends are microseconds away, less than a sleep and a
  // wake-up call cost.
  if (in_bodies_ > 0 && pool_->quick()) {
    spin_until(pool_->env(), StepPool::kSpin,
               [this] { return signalled_.load(std::memory_order_acquire); });
  }
  {
    std::unique_lock lock(mutex_);
    waiting_ = true;
    const auto woken = [this] { return !woken_.empty() || poked_; };
    if (until) {
      pool_->env().wait_until(woken_cv_, lock, *until, woken);
    } else {
      woken_cv_.wait(lock, woken);
    }
    waiting_ = false;
    poked_ = false;
    for (Task* w : woken_) ready_.push_back(w);
    woken_.clear();
    signalled_ = false;
  }
  const auto now = pool_->env().steady_now();
  for (auto it = sleeping_.begin(); it != sleeping_.end();) {
    if ((*it)->wake_at <= now) {
      ready_.push_back(*it);
      it = sleeping_.erase(it);
    } else {
      ++it;
    }
  }
}

// Both notify under the lock: once it is released, the scheduler may run the woken task to its
// end and be destroyed, so nothing here may touch it after that.
void FiberScheduler::poke() {
  std::lock_guard lock(mutex_);
  poked_ = true;
  signalled_.store(true, std::memory_order_release);
  if (waiting_) woken_cv_.notify_one();
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
  std::lock_guard lock(mutex_);
  woken_.push_back(&task);
  signalled_.store(true, std::memory_order_release);
  if (waiting_) woken_cv_.notify_one();  // no call while the scheduler is busy running fibers
}

bool FiberScheduler::on_fiber() const { return running_ != nullptr && t_current == this; }

void FiberScheduler::run_bodies(std::vector<std::function<void()>>& bodies) {
  if (!on_fiber()) {
    pool_->run_all(bodies);
    return;
  }
  // Even alone, the bodies go to the step threads: this thread stays free to admit runs that
  // come due meanwhile, however long the bodies take.
  Task& task = *running_;
  auto left = std::make_shared<std::atomic<std::size_t>>(bodies.size());
  for (auto& body : bodies) {
    pool_->submit([this, &task, &body, left] {
      body();
      if (left->fetch_sub(1) == 1) wake(task);
    });
  }
  ++in_bodies_;
  suspend();
  --in_bodies_;
}

void FiberScheduler::sleep_until(std::chrono::steady_clock::time_point until) {
  if (running_ == nullptr || t_current != this) {
    pool_->env().sleep_until(until);
    return;
  }
  running_->wake_at = until;
  sleeping_.push_back(running_);
  suspend();
}

}  // namespace durable::detail
