// SPDX-License-Identifier: Apache-2.0
#include "heartbeat.hpp"

namespace durable::detail {

void Heartbeat::start() {
  std::call_once(started_, [this] {
    heartbeat_ = c_.env->start_thread([this] { beat(); });
    watcher_ = c_.env->start_thread([this] { watch_for_work(); });
  });
}

void Heartbeat::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (watcher_.joinable()) watcher_.join();
}

// Renews the leases of the runs this runtime executes, a third of a lease apart, so a step body
// longer than the lease keeps its run, and marks the worker seen at every beat, executing or
// not, which is what `stats` counts as a live worker. Runs on its own thread from the first
// run_until_idle(), wait() or serve() until the runtime is destroyed.
void Heartbeat::beat() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    beat_once();
    lock.lock();
    c_.env->wait_for(wake_, lock, c_.lease / 3, [this] { return stopping_; });
  }
}

// A failed write (a busy or full disk, a lost connection) is logged, since no caller hears of
// it, and tried again at the next beat; meanwhile the commit of each step still checks that the
// run is ours, and a worker seen less than kLiveLeases leases ago still counts as live.
void Heartbeat::failed(const std::exception& e, const char* what) {
  c_.logger.write(LogLevel::warn, "runtime.heartbeat_failed",
                  std::string("cannot ") + what + "; trying again at the next beat",
                  {{"error", e.what()}}, c_.env->now_ms());
}

void Heartbeat::beat_once() {
  Beat beat;
  beat.held = c_.held();
  // A halted runtime (the crash sweep's crash) is as dead as a killed one: it goes unseen.
  if (!c_.halted()) beat.worker = &c_.worker;
  beat.owner = c_.worker.id;
  beat.now_ms = c_.env->now_ms();
  beat.lease_ms = c_.lease.count();
  beat.counters = c_.counters();
  beat.until_ms = beat.now_ms + beat.lease_ms;
  try {
    if (beat.worker != nullptr || !beat.held.empty()) {
      Writer::Request request;
      request.beats = {&beat};
      c_.writer.write(request);
    }
  } catch (const std::exception& e) {
    failed(e, "mark this worker seen and renew the leases of the runs it executes");
  }
  try {
    // The rows of workers long dead, whichever host they ran on (the constructor forgets only
    // this host's), once a lease: their silence is measured in leases too.
    const std::int64_t now = c_.env->now_ms();
    if (!c_.halted() && now >= next_forget_ms_) {
      next_forget_ms_ = now + c_.lease.count();
      c_.writer.alone([&](WorkerStore& store) { return store.forget_dead_workers(now); });
    }
  } catch (const std::exception& e) {
    failed(e, "forget the workers that stopped beating");
  }
}

// Wakes the worker loops as soon as another process (on any host) announces due work, where the
// database can tell (WorkWatch; PostgreSQL's LISTEN/NOTIFY); polling every poll_interval stays
// the fallback, and the only way on SQLite. A watch whose connection broke is opened again, no
// more often than once a second. Runs from the first run_until_idle(), wait() or serve() until
// the runtime is destroyed, waking at least every kWatchSlice to see whether it is.
void Heartbeat::watch_for_work() {
  constexpr auto kWatchSlice = std::chrono::milliseconds(200);
  std::unique_ptr<WorkWatch> watch;
  bool first = true;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (!watch && !first) {
      // A second apart, and no wait at all once the runtime closes.
      if (c_.env->wait_for(wake_, lock, std::chrono::seconds(1), [this] { return stopping_; })) {
        break;
      }
    }
    lock.unlock();
    bool woke = false;
    try {
      if (!watch) {
        first = false;
        watch = open_work_watch(c_.database);
        if (!watch) return;  // nothing to watch: polling it is
      }
      woke = watch->wait(kWatchSlice);
    } catch (const std::exception& e) {
      watch.reset();
      c_.logger.write(LogLevel::warn, "runtime.watch_lost",
                      "cannot listen for work other processes start; polling meanwhile",
                      {{"error", e.what()}}, c_.env->now_ms());
    }
    if (woke) c_.wake();
    lock.lock();
  }
}

}  // namespace durable::detail
