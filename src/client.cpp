// SPDX-License-Identifier: Apache-2.0
// The Client: a Runtime's start, event, read and manage calls on a database, without the worker.
// It registers no worker, claims nothing and knows no workflow code, so closing it or killing
// its process leaves every run as it is.
//
// How wait() notices a run's end without querying the run in a loop: SQLite's data_version of
// the Client's connection changes when any other connection commits (a worker in another
// process, or a Runtime in this one); that costs no table read. The Client's own writes do not
// change it on its own connection, so they wake waiters through a generation counter instead.
// The run is read again only after one of the two moved.

#include <algorithm>
#include <condition_variable>
#include <durable/client.hpp>
#include <mutex>
#include <optional>

#include "durations.hpp"
#include "env.hpp"
#include "ops_queries.hpp"
#include "published.hpp"
#include "run_requests.hpp"
#include "store.hpp"
#include "stream_reads.hpp"

namespace durable::detail {

class ClientCore {
 public:
  ClientCore(const std::string& database, std::shared_ptr<const Payloads> payloads);
  std::string start(std::string_view workflow, const json& input, const StartOptions& opts);
  void send_event(std::string_view name, const json& data);
  void send(std::string_view run_id, std::string_view topic, const json& message);
  RunInfo get(std::string_view run_id);
  std::vector<RunInfo> list(const RunFilter& filter);
  std::vector<StepInfo> steps(std::string_view run_id);
  void cancel(std::string_view run_id, const std::string& reason);
  void retry(std::string_view run_id);
  RunInfo wait(std::string_view run_id, std::chrono::milliseconds timeout);
  std::optional<json> published(std::string_view run_id, std::string_view key,
                                std::chrono::milliseconds wait);
  StreamRead read_stream(std::string_view run_id, std::string_view stream, std::size_t from,
                         std::chrono::milliseconds wait);

 private:
  // How often wait() looks at the database's change counter.
  static constexpr std::chrono::milliseconds kWatchInterval{5};
  // The longest wait() honoured as such: a longer timeout (milliseconds::max()) would overflow
  // the deadline.
  static constexpr std::chrono::hours kLongestWait{24 * 365 * 100};

  std::int64_t now_ms() { return env_.now_ms(); }
  // Wakes the waiters of this Client after one of its own writes.
  void changed();
  std::uint64_t generation();
  // Waits until the database or this Client changed since `version` and `seen`, or the
  // deadline.
  void watch(std::int64_t version, std::uint64_t seen,
             std::chrono::steady_clock::time_point deadline);

  // The same limit as a Runtime left at its defaults, so that a Client refuses what it would.
  const std::size_t max_bytes_ = RuntimeOptions{}.max_output_bytes;

  Env& env_ = Env::system();
  std::mutex store_mutex_;  // guards store_ and queries_: neither is thread-safe
  std::unique_ptr<Store> store_;
  std::unique_ptr<OpsQueries> queries_;  // which workflows some worker registered

  // Waits of published() and read_stream(): woken by the database's feed (a Client writes no
  // values itself).
  ChangeWatch changes_;

  std::mutex wake_mutex_;  // guards generation_
  std::condition_variable wake_;
  std::uint64_t generation_ = 0;  // counts this Client's starts, events, cancels and retries
};

namespace {

std::string checked_path(std::string database) {
  if (database.empty() || database == ":memory:") {
    throw Error(errc::config,
                "a Client needs a database file that workers open too, not '" + database + "'");
  }
  return database;
}

}  // namespace

ClientCore::ClientCore(const std::string& database, std::shared_ptr<const Payloads> payloads)
    : store_(open_store(checked_path(database), Durability::normal, std::move(payloads))),
      queries_(open_ops_queries(database)),
      changes_([database] { return open_change_feed(database); }, RuntimeOptions{}.poll_interval,
               env_) {}

std::string ClientCore::start(std::string_view workflow, const json& input,
                              const StartOptions& opts) {
  NewRun run = new_run(workflow, input, opts, env_, max_bytes_);
  std::string id;
  {
    std::lock_guard lock(store_mutex_);
    const std::vector<std::string> known = queries_->known_workflows();
    if (std::find(known.begin(), known.end(), run.workflow) == known.end()) {
      mark_unregistered(run);
    }
    id = store_->create_run(run);
  }
  changed();
  return id;
}

void ClientCore::send_event(std::string_view name, const json& data) {
  const NewEvent event = new_event(name, data, env_, max_bytes_);
  {
    std::lock_guard lock(store_mutex_);
    store_->publish(event);
  }
  changed();
}

void ClientCore::send(std::string_view run_id, std::string_view topic, const json& message) {
  const NewMessage m = new_message(run_id, topic, message, now_ms(), max_bytes_);
  {
    std::lock_guard lock(store_mutex_);
    message_sent(store_->send_message(m), m);
  }
  changed();
}

RunInfo ClientCore::get(std::string_view run_id) {
  std::lock_guard lock(store_mutex_);
  std::optional<RunInfo> run = store_->get_run(std::string(run_id), true);
  if (!run) throw no_such_run(run_id);
  return std::move(*run);
}

std::vector<RunInfo> ClientCore::list(const RunFilter& filter) {
  std::lock_guard lock(store_mutex_);
  return store_->list_runs(filter);
}

std::vector<StepInfo> ClientCore::steps(std::string_view run_id) {
  std::lock_guard lock(store_mutex_);
  std::optional<std::vector<StepInfo>> steps = store_->list_steps(std::string(run_id));
  if (!steps) throw no_such_run(run_id);
  return std::move(*steps);
}

void ClientCore::cancel(std::string_view run_id, const std::string& reason) {
  {
    std::lock_guard lock(store_mutex_);
    if (!store_->cancel(std::string(run_id), now_ms(), reason)) throw no_such_run(run_id);
  }
  changed();
}

void ClientCore::retry(std::string_view run_id) {
  {
    std::lock_guard lock(store_mutex_);
    if (!store_->retry(std::string(run_id), now_ms())) throw no_such_run(run_id);
  }
  changed();
}

RunInfo ClientCore::wait(std::string_view run_id, std::chrono::milliseconds timeout) {
  const auto deadline =
      env_.steady_now() + std::clamp<std::chrono::milliseconds>(timeout, {}, kLongestWait);
  for (;;) {
    // Both marks are taken before the run is read: a change after the read is not missed.
    const std::uint64_t seen = generation();
    std::int64_t version = 0;
    std::optional<RunInfo> run;
    {
      std::lock_guard lock(store_mutex_);
      version = store_->data_version();
      run = store_->get_run(std::string(run_id), true);
    }
    if (!run) throw no_such_run(run_id);
    if (ended(run->status) || env_.steady_now() >= deadline) return std::move(*run);
    watch(version, seen, deadline);
  }
}

std::optional<json> ClientCore::published(std::string_view run_id, std::string_view key,
                                          std::chrono::milliseconds wait) {
  return wait_published(
      changes_, run_id, key, wait,
      [&] {
        std::lock_guard lock(store_mutex_);
        return store_->published(std::string(run_id), std::string(key));
      },
      "Client::published");
}

StreamRead ClientCore::read_stream(std::string_view run_id, std::string_view stream,
                                   std::size_t from, std::chrono::milliseconds wait) {
  return wait_stream(
      changes_, run_id, stream, from, wait,
      [&](std::int64_t offset) {
        std::lock_guard lock(store_mutex_);
        return store_->read_stream(std::string(run_id), std::string(stream), offset,
                                   kStreamReadLimit);
      },
      "Client::read_stream");
}

void ClientCore::watch(std::int64_t version, std::uint64_t seen,
                       std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    {
      std::unique_lock lock(wake_mutex_);
      const auto until = std::min(deadline, env_.steady_now() + kWatchInterval);
      if (env_.wait_until(wake_, lock, until, [&] { return generation_ != seen; })) return;
    }
    if (env_.steady_now() >= deadline) return;
    std::lock_guard lock(store_mutex_);
    if (store_->data_version() != version) return;
  }
}

void ClientCore::changed() {
  {
    std::lock_guard lock(wake_mutex_);
    ++generation_;
  }
  wake_.notify_all();
}

std::uint64_t ClientCore::generation() {
  std::lock_guard lock(wake_mutex_);
  return generation_;
}

}  // namespace durable::detail

namespace durable {

Client::Client(std::string database) : Client(std::move(database), std::nullopt) {}
Client::Client(std::string database, std::optional<Codec> codec, std::string encryption_key_file)
    : core_(std::make_unique<detail::ClientCore>(
          database,
          std::make_shared<const detail::Payloads>(std::move(codec), encryption_key_file))) {}
Client::~Client() = default;
std::string Client::start(std::string_view workflow, json input, StartOptions opts) {
  return core_->start(workflow, input, opts);
}
void Client::send_event(std::string_view name, json data) { core_->send_event(name, data); }
void Client::send(std::string_view run_id, std::string_view topic, json message) {
  core_->send(run_id, topic, message);
}
RunInfo Client::get(std::string_view run_id) const { return core_->get(run_id); }
std::vector<RunInfo> Client::list(const RunFilter& filter) const { return core_->list(filter); }
std::vector<StepInfo> Client::steps(std::string_view run_id) const { return core_->steps(run_id); }
void Client::cancel(std::string_view run_id, std::string reason) { core_->cancel(run_id, reason); }
void Client::retry(std::string_view run_id) { core_->retry(run_id); }
RunInfo Client::wait(std::string_view run_id, std::chrono::milliseconds timeout) {
  return core_->wait(run_id, timeout);
}
std::optional<json> Client::published(std::string_view run_id, std::string_view key,
                                      std::chrono::milliseconds wait) const {
  return core_->published(run_id, key, wait);
}
StreamRead Client::read_stream(std::string_view run_id, std::string_view stream, std::size_t from,
                               std::chrono::milliseconds wait) const {
  return core_->read_stream(run_id, stream, from, wait);
}

}  // namespace durable
