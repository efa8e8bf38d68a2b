// The worker loop on Boost.Asio: one timer brings the loop back when the next run is due (a
// sleep, a backoff, a delayed start, an event timeout, a schedule) or, at the latest, after
// poll_interval, to find work other processes wrote. SIGINT and SIGTERM are watched on a thread
// of their own, so a stop is seen while a batch of runs executes on the serving thread.

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "api.hpp"
#include "runtime_core.hpp"

namespace durable::detail {

namespace asio = boost::asio;

void RuntimeCore::serve() {
  if (serving_.exchange(true)) throw Error("this runtime is already serving");
  struct Done {
    RuntimeCore* core;
    ~Done() {
      core->serving_ = false;
      core->stop_requested_ = false;
    }
  } done{this};

  asio::io_context signal_io;
  asio::signal_set signals(signal_io, SIGINT, SIGTERM);
  // The first signal stops gracefully; a second one, while the step bodies finish, exits at
  // once (what was journaled stays; the bodies cut short run again, as after a crash).
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& error, int number) {
        if (error) return;
        const std::string name = number == SIGINT ? "SIGINT" : "SIGTERM";
        if (stop_requested_) {
          logger_.write(LogLevel::warn, "serve.signal", name + " again: exiting at once",
                        json::object(), now_ms());
          std::_Exit(128 + number);
        }
        logger_.write(LogLevel::info, "serve.signal",
                      name + ": finishing the step bodies that run, then handing their runs back",
                      json::object(), now_ms());
        stop();
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);
  std::thread signal_thread([&signal_io] { signal_io.run(); });
  struct JoinSignals {
    asio::io_context* io;
    std::thread* thread;
    ~JoinSignals() {
      io->stop();
      thread->join();
    }
  } join_signals{&signal_io, &signal_thread};

  asio::io_context io;
  asio::steady_timer timer(io);
  {
    std::lock_guard lock(serve_mutex_);
    // A start, event, cancel or stop in this process: look for work now, not at the timer.
    serve_wake_ = [&io, &timer] { asio::post(io, [&timer] { timer.cancel(); }); };
  }
  // Declared after io and timer, so destroyed before them: no wake is posted to a dead loop.
  struct ForgetWake {
    RuntimeCore* core;
    ~ForgetWake() {
      std::lock_guard lock(core->serve_mutex_);
      core->serve_wake_ = nullptr;
    }
  } forget_wake{this};
  // The admin HTTP API and dashboard, when asked for: on threads of their own, while this
  // serves. Declared after forget_wake, so stopped before the wake-up is forgotten.
  std::unique_ptr<ops::Admin> admin;
  std::unique_ptr<ops::HttpServer> http;
  struct ForgetUrl {
    RuntimeCore* core;
    ~ForgetUrl() {
      std::lock_guard lock(core->serve_mutex_);
      core->http_url_.clear();
    }
  } forget_url{this};
  if (!options_.http.address.empty()) {
    admin = std::make_unique<ops::Admin>(
        options_.database, [this] { notify_waiters(); }, [this] { return now_(); },
        options_.durability);
    ops::HttpOptions listen;
    listen.address = options_.http.address;
    listen.port = options_.http.port;
    listen.token = options_.http.token;
    http = std::make_unique<ops::HttpServer>(listen, ops::api_handler(*admin));
    std::lock_guard lock(serve_mutex_);
    http_url_ = http->url();
  }
  logger_.write(LogLevel::info, "serve.started", "serving",
                {{"worker", worker_.id}, {"http", http ? http->url() : ""}}, now_ms());

  // One round: execute what is due, then set the timer for the next due time (capped by
  // poll_interval). A database error is logged and the round tried again after poll_interval:
  // runs of a batch it hit stay claimed by this runtime until their lease lapses, then any
  // runtime takes them.
  std::function<void()> pump;
  const auto again_in = [&](std::chrono::milliseconds pause) {
    timer.expires_after(pause);
    timer.async_wait([&](const boost::system::error_code&) { pump(); });
  };
  pump = [&] {
    if (stop_requested_) return io.stop();
    const std::uint64_t seen = wake_generation();
    std::optional<std::int64_t> due;
    try {
      run_due(std::nullopt, kClaimBatch);
      check_backlog();
      if (stop_requested_) return io.stop();
      if (wake_generation() != seen) return asio::post(io, pump);  // woken while it ran
      const std::vector<std::string> names = workflow_names();
      std::lock_guard lock(store_mutex_);
      due = store_->next_due(names, {executing_.begin(), executing_.end()});
      const std::optional<std::int64_t> fire = store_->next_schedule_at();
      if (fire) due = due ? std::min(*due, *fire) : fire;
    } catch (const std::exception& e) {
      logger_.write(LogLevel::error, "serve.error", e.what(), json::object(), now_ms());
      return again_in(options_.poll_interval);
    }
    auto pause = options_.poll_interval;
    if (due) {
      // A run due now that could not be claimed (its workflow at its concurrency limit, or
      // another process got there first) is looked at again soon, not in a spin.
      const std::int64_t until = *due - now_ms();
      pause = std::min(pause, std::chrono::milliseconds(until > 0 ? until : 5 * kMinPause));
    }
    again_in(pause);
  };
  asio::post(io, pump);
  io.run();
  logger_.write(LogLevel::info, "serve.stopped", "stopped", {{"worker", worker_.id}}, now_ms());
}

void RuntimeCore::stop() {
  stop_requested_ = true;
  notify_waiters();
}

// The backlog signals: runs due and not yet claimed, by count and by the age of the oldest.
// Looked at once per poll_interval at most; each signal is logged when crossed and when cleared.
void RuntimeCore::check_backlog() {
  // serve() calls this from its thread; a wait() or run_until_idle() on another thread while it
  // serves does too. One look at a time; the other skips.
  std::unique_lock guard(backlog_mutex_, std::try_to_lock);
  if (!guard.owns_lock()) return;
  const std::int64_t now = now_ms();
  if (now < next_backlog_check_ms_) return;
  next_backlog_check_ms_ = now + options_.poll_interval.count();
  if (options_.backlog_warning == 0 && options_.backlog_age_breach.count() == 0) return;
  Backlog backlog;
  {
    std::lock_guard lock(store_mutex_);
    backlog = store_->backlog(now);
  }
  const std::int64_t age = backlog.oldest_due_ms ? now - *backlog.oldest_due_ms : 0;
  const json fields = {{"pending", backlog.depth}, {"oldest_pending_age_ms", age}};
  if (options_.backlog_warning > 0) {
    const bool deep = backlog.depth >= options_.backlog_warning;
    if (deep != backlog_deep_) {
      logger_.write(deep ? LogLevel::warn : LogLevel::info,
                    deep ? "workflow.backlog_warning" : "workflow.backlog_cleared",
                    deep ? std::to_string(backlog.depth) + " runs due and not claimed (threshold " +
                               std::to_string(options_.backlog_warning) + ")"
                         : "pending depth back under the threshold",
                    fields, now);
      backlog_deep_ = deep;
    }
  }
  if (options_.backlog_age_breach.count() > 0) {
    const bool old = age >= options_.backlog_age_breach.count();
    if (old != backlog_old_) {
      logger_.write(old ? LogLevel::warn : LogLevel::info,
                    old ? "workflow.backlog_age_breach" : "workflow.backlog_age_cleared",
                    old ? "the oldest due run has waited " + std::to_string(age) +
                              " ms to be claimed (threshold " +
                              std::to_string(options_.backlog_age_breach.count()) + " ms)"
                        : "the oldest due run's wait is back under the threshold",
                    fields, now);
      backlog_old_ = old;
    }
  }
}

}  // namespace durable::detail
