// SPDX-License-Identifier: Apache-2.0
// The worker loop: a pause on the Env's clock brings the loop back when the next run is due (a
// sleep, a backoff, a delayed start, an event timeout, a schedule) or, at the latest, after
// poll_interval, to find work other processes wrote; a start, event, cancel or stop in this
// process ends the pause at once. SIGINT and SIGTERM are watched on a thread
// of their own, so a stop is seen while a batch of runs executes on the serving thread.

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "api.hpp"
#include "runtime_core.hpp"

namespace durable::detail {

namespace asio = boost::asio;

namespace {

// The longest pause between rounds while the database keeps failing.
constexpr std::chrono::milliseconds kMaxErrorPause{30'000};
// Events deleted per transaction, so that a purge holds the write lock for milliseconds only;
// and batches per round, so that a large first purge does not hold up the runs for long.
constexpr std::size_t kPurgeBatch = 1000;
constexpr int kPurgeBatchesPerRound = 10;
// How often serve() looks for events to purge once none of that age were left.
constexpr std::int64_t kPurgeEveryMs = 60'000;

// serve()'s rounds while the database fails (a full disk, a read-only file): the pause doubles
// from poll_interval up to kMaxErrorPause, so a broken database is not hammered and the log
// not flooded. The first error is logged; after it, at most one line per pause, with how many
// rounds failed since the last line (rounds also run when woken by a start or an event in
// this process). The first round that succeeds again logs serve.recovered.
class ErrorBackoff {
 public:
  ErrorBackoff(std::chrono::milliseconds first, Env& env)
      : env_(env), first_(first), pause_(first) {}

  // Logs as above; returns the pause before the next round.
  std::chrono::milliseconds failed(Logger& logger, const std::string& what, std::int64_t now_ms) {
    const auto now = env_.steady_now();
    ++unlogged_;
    if (failures_++ == 0 || now >= next_log_) {
      logger.write(
          LogLevel::error, "serve.error", what,
          {{"failures", failures_}, {"repeats", unlogged_ - 1}, {"retry_in_ms", pause_.count()}},
          now_ms);
      unlogged_ = 0;
      next_log_ = now + pause_;
    }
    const auto pause = pause_;
    pause_ = std::min(pause_ * 2, std::max(kMaxErrorPause, first_));
    return pause;
  }

  void succeeded(Logger& logger, std::int64_t now_ms) {
    if (failures_ == 0) return;
    logger.write(
        LogLevel::info, "serve.recovered",
        "the database answers again after " + std::to_string(failures_) + " failed round(s)",
        {{"failures", failures_}}, now_ms);
    failures_ = 0;
    unlogged_ = 0;
    pause_ = first_;
  }

 private:
  Env& env_;
  std::chrono::milliseconds first_, pause_;
  std::int64_t failures_ = 0;  // rounds failed in a row
  std::int64_t unlogged_ = 0;  // of them, failed since the last line
  std::chrono::steady_clock::time_point next_log_{};
};

// Deletes events older than event_retention, a batch per transaction; once a minute, or at
// once on the next round while more of that age are left. Store::purge_events keeps what a
// waiting run may need.
void purge_batches(const WithStore& store, std::int64_t retention_ms, std::int64_t now_ms,
                   std::int64_t& next_purge_ms, Logger& logger) {
  std::size_t deleted = 0;
  bool more = false;
  for (int batch = 0; batch < kPurgeBatchesPerRound; ++batch) {
    std::size_t n = 0;
    // A write of its own each: the runs' own writes queued meanwhile go between batches.
    store([&](EventStore& s) { n = s.purge_events(now_ms - retention_ms, kPurgeBatch); });
    deleted += n;
    more = n == kPurgeBatch;
    if (!more) break;
  }
  next_purge_ms = more ? now_ms : now_ms + kPurgeEveryMs;
  if (deleted > 0) {
    logger.write(LogLevel::info, "serve.events_purged",
                 std::to_string(deleted) + " event(s) older than the retention deleted",
                 {{"deleted", deleted}, {"retention_ms", retention_ms}}, now_ms);
  }
}

// As purge_batches, when the retention asks for it. A failure is logged and tried again at the
// next time: housekeeping only, the runs go on.
void purge_old_events(const WithStore& store, std::int64_t retention_ms, std::int64_t now_ms,
                      std::int64_t& next_purge_ms, Logger& logger) {
  if (retention_ms <= 0 || now_ms < next_purge_ms) return;
  try {
    purge_batches(store, retention_ms, now_ms, next_purge_ms, logger);
  } catch (const std::exception& e) {
    logger.write(LogLevel::warn, "serve.purge_error", e.what(), json::object(), now_ms);
    next_purge_ms = now_ms + kPurgeEveryMs;
  }
}

// The pause before serve()'s next round: until the next due time, at most poll_interval. A
// run due now that could not be claimed (its workflow at its concurrency limit, or another
// process got there first) is looked at again `soon`, not in a spin.
std::chrono::milliseconds pause_before(std::optional<std::int64_t> due, std::int64_t now_ms,
                                       std::chrono::milliseconds poll_interval,
                                       std::chrono::milliseconds soon) {
  if (!due) return poll_interval;
  const std::int64_t until = *due - now_ms;
  return std::min(poll_interval, until > 0 ? std::chrono::milliseconds(until) : soon);
}

// SIGINT and SIGTERM, watched on a thread of their own while serve() runs, so that a stop is
// seen while a batch of runs executes on the serving thread. The first stops gracefully; a
// second one, while the step bodies finish, exits at once (what was journaled stays; the bodies
// cut short run again, as after a crash).
class SignalWatch {
 public:
  SignalWatch(Logger& logger, Env& env, std::function<bool()> stopping, std::function<void()> stop)
      : logger_(logger), env_(env), stopping_(std::move(stopping)), stop_(std::move(stop)) {
    watch();
    thread_ = env_.start_thread([this] { io_.run(); });
  }
  ~SignalWatch() {
    io_.stop();
    thread_.join();
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

 private:
  void watch() {
    signals_.async_wait([this](const boost::system::error_code& error, int number) {
      if (!error) caught(number);
    });
  }

  void caught(int number) {
    const std::string name = number == SIGINT ? "SIGINT" : "SIGTERM";
    if (stopping_()) {
      logger_.write(LogLevel::warn, "serve.signal", name + " again: exiting at once",
                    json::object(), env_.now_ms());
      std::_Exit(128 + number);
    }
    logger_.write(LogLevel::info, "serve.signal",
                  name + ": finishing the step bodies that run, then handing their runs back",
                  json::object(), env_.now_ms());
    stop_();
    watch();
  }

  Logger& logger_;
  Env& env_;
  std::function<bool()> stopping_;
  std::function<void()> stop_;
  asio::io_context io_;
  asio::signal_set signals_{io_, SIGINT, SIGTERM};
  std::thread thread_;
};

// serve()'s retention (RuntimeOptions::retention) on a thread of its own: a steady stream of
// work keeps serve()'s loop from ever idling, and a purge batch there would hold every run up
// meanwhile. A round returns the pause before the next; the destructor stops it.
class Janitor {
 public:
  Janitor(Env& env, std::function<std::chrono::milliseconds()> round)
      : env_(env), thread_(env.start_thread([this, round = std::move(round)] { loop(round); })) {}
  ~Janitor() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

 private:
  void loop(const std::function<std::chrono::milliseconds()>& round) {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      lock.unlock();
      const std::chrono::milliseconds pause = round();
      lock.lock();
      env_.wait_for(wake_, lock, pause, [this] { return stop_; });
    }
  }

  Env& env_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: it starts once the members it uses exist
};

// serve()'s pause between rounds, which a start, event, cancel or stop in this process ends.
class Wakeup {
 public:
  explicit Wakeup(Env& env) : env_(env) {}
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;
  void wake() {
    {
      std::lock_guard lock(mutex_);
      woken_ = true;
    }
    woken_cv_.notify_all();
  }
  void wait(std::chrono::milliseconds pause) {
    std::unique_lock lock(mutex_);
    env_.wait_for(woken_cv_, lock, pause, [this] { return woken_; });
    woken_ = false;
  }

 private:
  Env& env_;
  std::mutex mutex_;
  std::condition_variable woken_cv_;
  bool woken_ = false;
};

// The admin HTTP API and dashboard of serve(), when RuntimeOptions::http asks for them: on
// threads of their own, on an Admin of its own (its writes wake this runtime).
struct HttpServing {
  std::unique_ptr<ops::Admin> admin;
  std::unique_ptr<ops::HttpServer> server;
};

HttpServing serve_http(const RuntimeOptions& options, std::function<void()> on_change, Env& env,
                       ops::Admin::ResolveCheck resolve_check,
                       std::shared_ptr<ChangeWatch> changes) {
  HttpServing serving;
  if (options.http.address.empty()) return serving;
  serving.admin = std::make_unique<ops::Admin>(
      options.database, std::move(on_change), &env, options.durability, 8, false,
      std::make_shared<const Payloads>(options.codec, options.encryption_key_file));
  serving.admin->share_changes(std::move(changes));  // this runtime's commits wake its waits
  serving.admin->set_resolve_check(std::move(resolve_check));
  serving.admin->set_max_data_bytes(options.max_output_bytes);
  ops::HttpOptions listen;
  listen.address = options.http.address;
  listen.port = options.http.port;
  listen.token = options.http.token;
  listen.signing_secret = options.http.signing_secret;
  listen.tls_cert_file = options.http.tls_cert_file;
  listen.tls_key_file = options.http.tls_key_file;
  listen.static_responses = ops::static_pages();
  serving.server = std::make_unique<ops::HttpServer>(listen, ops::api_handler(*serving.admin));
  return serving;
}

}  // namespace

void RuntimeCore::serve() {
  if (serving_.exchange(true)) throw Error(errc::misuse, "this runtime is already serving");
  struct Done {
    RuntimeCore* core;
    ~Done() {
      core->serving_ = false;
      core->stop_requested_ = false;
    }
  } done{this};
  const SignalWatch signals(
      logger_, *env_, [this] { return stop_requested_.load(); }, [this] { stop(); });
  std::optional<Janitor> janitor;
  if (options_.retention.count() > 0) {
    janitor.emplace(*env_, [this] { return purge_expired_runs(); });
  }
  // A start, event, cancel or stop in this process: look for work now, not after the pause.
  Wakeup wakeup(*env_);
  const Served served(*this, [&wakeup] { wakeup.wake(); });
  const HttpServing serving = serve_http(
      options_, [this] { notify_waiters(); }, *env_,
      [this](const RecordedRun& run, const std::string& step, const json& output) {
        check_resolution(run, step, output);  // against this runtime's code
      },
      changes_);
  const std::unique_ptr<ops::HttpServer>& http = serving.server;
  if (http) served.set_url(http->url());
  logger_.write(LogLevel::info, "serve.started", "serving",
                {{"worker", worker_.id}, {"http", http ? http->url() : ""}}, now_ms());

  // One round: execute what is due, then pause until the next due time (capped by
  // poll_interval). A database error is logged and the round tried again after poll_interval:
  // runs of a batch it hit stay claimed by this runtime until their lease lapses, then any
  // runtime takes them.
  ErrorBackoff backoff(options_.poll_interval, *env_);
  std::int64_t next_purge_ms = 0;
  const auto round = [&]() -> std::chrono::milliseconds {
    const std::uint64_t seen = wake_generation();
    std::optional<std::int64_t> due;
    try {
      run_due(std::nullopt, kClaimBatch);
      backlog_.check();
      if (stop_requested_ || wake_generation() != seen) return {};  // woken while it ran
      due = next_anything_due();
    } catch (const std::exception& e) {
      return backoff.failed(logger_, e.what(), now_ms());
    }
    backoff.succeeded(logger_, now_ms());
    purge_old_events(control_.bulk_store(), options_.event_retention.count(), now_ms(),
                     next_purge_ms, logger_);
    return pause_before(due, now_ms(), options_.poll_interval,
                        std::chrono::milliseconds(5 * kMinPause));
  };
  while (!stop_requested_) wakeup.wait(round());
  logger_.write(LogLevel::info, "serve.stopped", "stopped", {{"worker", worker_.id}}, now_ms());
}

// When a run, a schedule's fire or a deadline is due next, if any is.
std::optional<std::int64_t> RuntimeCore::next_anything_due() {
  const std::vector<std::string> names = workflow_names();
  std::lock_guard lock(store_mutex_);
  std::optional<std::int64_t> due = store_->next_due(names, {executing_.begin(), executing_.end()});
  for (const std::optional<std::int64_t> next : {schedules_.next_fire(*store_), next_deadline()}) {
    if (next) due = due ? std::min(*due, *next) : next;
  }
  return due;
}

// While serving: serve()'s wake-up and the admin API's address, forgotten as serve() returns.
RuntimeCore::Served::Served(RuntimeCore& core, std::function<void()> wake) : core_(core) {
  std::lock_guard lock(core_.serve_mutex_);
  core_.serve_wake_ = std::move(wake);
}

RuntimeCore::Served::~Served() {
  std::lock_guard lock(core_.serve_mutex_);
  core_.serve_wake_ = nullptr;
  core_.http_url_.clear();
}

void RuntimeCore::Served::set_url(std::string url) const {
  std::lock_guard lock(core_.serve_mutex_);
  core_.http_url_ = std::move(url);
}

void RuntimeCore::stop() {
  stop_requested_ = true;
  notify_waiters();
}

}  // namespace durable::detail
