// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// A handle on a durable database for processes that start and watch runs but execute none.

#include <chrono>
#include <durable/info.hpp>
#include <durable/options.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace durable {

namespace detail {
class ClientCore;
}  // namespace detail

/// Starts, watches and manages runs in a database without ever executing one: for a web service
/// or a script that enqueues work that worker processes (Runtime::serve) carry out. No workflow
/// code is linked or added: start() takes any workflow name, and whichever Runtime on the
/// database has that workflow added runs it.
///
/// Thread-safe: any method may be called from any thread. Several Clients and Runtimes, in one
/// process or many, may open the same database file. A Client registers no worker and claims
/// nothing: closing it or killing its process leaves every run as it is.
class Client {
 public:
  /// Opens (or creates) the database file. Throws Error for ":memory:" or an empty path (a
  /// Client needs a file a worker can open too), a file that is not a durable database (left
  /// untouched), a corrupt file, or one written by a newer durable.
  explicit Client(std::string database);
  /// A Client on a database whose workers store payloads encoded (RuntimeOptions::codec and
  /// encryption_key_file): it needs the same, to write inputs and event data they can read and
  /// to read theirs. Throws Error also for a missing or malformed key file, before the database
  /// is opened.
  Client(std::string database, std::optional<Codec> codec, std::string encryption_key_file = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Queues a run of `workflow` and returns its id, as Runtime::start does: a second start of the
  /// workflow with the same StartOptions::idempotency_key returns the first run's id and creates
  /// nothing; StartOptions::at delays it. The name is not checked against any code: a run of a
  /// workflow no worker has registered yet waits for one that has it (its history says so), and
  /// an input that the workflow's typed form cannot take fails the run on its first invocation.
  /// Throws Error for an empty name, and for an input that cannot be stored or whose JSON text is
  /// larger than 4 MiB (the default RuntimeOptions::max_output_bytes); nothing is written then.
  std::string start(std::string_view workflow, json input = json::object(), StartOptions opts = {});

  /// Stores an event and delivers it, as Runtime::send_event does: it starts a run of each
  /// workflow some worker registered for the name and wakes the runs waiting for it whose match
  /// fields equal the data's. Throws Error for an empty name, or data that cannot be stored or is
  /// larger than 4 MiB as JSON text; nothing is written then.
  void send_event(std::string_view name, json data = json::object());
  /// Puts a message in one run's mailbox, as Runtime::send does (4 MiB limit as above). Throws
  /// NotFound for an unknown run, Error for a run that has ended or a bad topic or message.
  void send(std::string_view run_id, std::string_view topic, json message);

  /// The run with this id, with its state history. Throws NotFound.
  RunInfo get(std::string_view run_id) const;
  /// Runs matching the filter, newest first, without their state history (get() has it).
  std::vector<RunInfo> list(const RunFilter& filter = {}) const;
  /// The journal of a run, in the order its entries were first written. Throws NotFound.
  std::vector<StepInfo> steps(std::string_view run_id) const;

  /// Ends a pending, sleeping, waiting or running run as cancelled, or closes a failed one, as
  /// Runtime::cancel does; `reason` goes into the state history. No further step of it starts,
  /// and the result of a step body already running is not journaled. Throws NotFound; a run
  /// already completed or cancelled is left as it is.
  void cancel(std::string_view run_id, std::string reason = {});
  /// Queues a failed run again, as Runtime::retry does. Throws NotFound, and Error for a run that
  /// is not failed.
  void retry(std::string_view run_id);

  /// Watches the run until it is completed, failed or cancelled, or the timeout passes, and
  /// returns it as it then is (with its state history). Executes nothing: the run ends only if a
  /// Runtime that has its workflow, in this process or another, executes it. Returns within a few
  /// milliseconds of the run's end, whichever process ended it: it looks at the database's change
  /// counter every few milliseconds, which costs no query of the run, and reads the run again
  /// only when something changed. Throws NotFound.
  RunInfo wait(std::string_view run_id, std::chrono::milliseconds timeout);
  /// As Runtime::published: the latest value run `run_id` published under `key`, waiting up to
  /// `wait` for it, woken as soon as a worker in any process publishes it (on SQLite, within
  /// RuntimeOptions{}.poll_interval; docs/messaging.md). Throws NotFound for an unknown run and
  /// Error for a bad key.
  std::optional<json> published(std::string_view run_id, std::string_view key,
                                std::chrono::milliseconds wait = {}) const;
  /// As Runtime::read_stream: the values of run `run_id`'s stream from offset `from`, waiting up
  /// to `wait` for one, woken as soon as a worker in any process writes or closes it. Throws
  /// NotFound for an unknown run and Error for a bad name.
  StreamRead read_stream(std::string_view run_id, std::string_view stream, std::size_t from = 0,
                         std::chrono::milliseconds wait = {}) const;

 private:
  std::unique_ptr<detail::ClientCore> core_;
};

}  // namespace durable
