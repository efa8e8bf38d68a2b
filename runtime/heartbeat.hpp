// SPDX-License-Identifier: Apache-2.0
#pragma once
// A runtime's two threads of its own beside the step threads, from its first run_until_idle(),
// wait() or serve() until it closes: the heartbeat, which renews the leases of the runs it
// executes and marks its worker seen, and the watch for work other processes make due.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "env.hpp"
#include "log.hpp"
#include "store.hpp"
#include "writer.hpp"

namespace durable::detail {

class Heartbeat {
 public:
  /// What it works with, all of the runtime's and outliving it.
  struct Context {
    Writer& writer;
    Logger& logger;
    const std::shared_ptr<Env>& env;  // the runtime's, as it is when the threads start
    const Worker& worker;
    std::function<bool()> halted;                    // the crash sweep's crash: unseen from now on
    std::function<std::vector<std::string>()> held;  // the runs it executes now
    std::function<std::string()> counters;           // as JSON, for the worker's row
    std::function<void()> wake;                      // work came due elsewhere
    std::chrono::milliseconds lease;
    std::string database;
  };
  explicit Heartbeat(Context context) : c_(std::move(context)) {}
  ~Heartbeat() { stop(); }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// Starts both threads, once.
  void start();
  bool started() const { return heartbeat_.joinable(); }
  /// Ends both threads and waits for them.
  void stop();

 private:
  void beat();
  void beat_once();
  void watch_for_work();
  void failed(const std::exception& e, const char* what);

  Context c_;
  std::int64_t next_forget_ms_ = 0;  // the next forget_dead_workers
  std::once_flag started_;
  std::mutex mutex_;  // guards stopping_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread heartbeat_;
  std::thread watcher_;  // WorkWatch: wakes the loops when another process made work due
};

}  // namespace durable::detail
