// SPDX-License-Identifier: Apache-2.0
#pragma once
// A TCP proxy between durable and a PostgreSQL server, for the connection fault tests: it
// forwards bytes both ways on 127.0.0.1, counts the statements its clients send, and at the one
// a test chose drops that statement's connection (closes both of its sockets, as a broken
// network or a killed server process would) or runs an action first (a server restart).
//
// It reads the frontend protocol only as far as counting needs: the untyped messages that open a
// connection (SSLRequest and GSSENCRequest, whose one-byte answer it forwards as the server gave
// it, then the StartupMessage, or a CancelRequest), then typed messages, a type byte and a length
// each. A connection the server agreed to encrypt is passed through unread and never counted.
//
// The unit counted, a statement, is one request libpq sends and then waits for the answer of: a
// simple query ('Q': BEGIN, COMMIT, SET, a LISTEN...) or an extended-protocol exchange, which ends
// with a Sync ('S'): preparing a statement (Parse, Sync), or running a prepared one or one with
// parameters (Bind, Describe, Execute, Sync). The messages of an exchange are held back until its
// Sync, so a statement dropped before the server sees it leaves the server none of it. Statements
// are counted across every connection, one count for the proxy.
//
// One thread of its own, polling every socket; the calls below may be made from any thread.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace durable::test {

class PgProxy {
 public:
  /// Where a drop strikes, at its statement.
  enum class When {
    before,  ///< the statement never reaches the server
    after,   ///< the server ran it and answered (up to ReadyForQuery); the answer is lost
  };

  /// Listens on 127.0.0.1, on a port the system chooses, and connects each client it accepts to
  /// the server at 127.0.0.1:`server_port`. Throws std::runtime_error when it cannot listen.
  explicit PgProxy(int server_port);
  /// Closes every connection and the listening socket, and joins the thread.
  ~PgProxy();
  PgProxy(const PgProxy&) = delete;
  PgProxy& operator=(const PgProxy&) = delete;

  /// The port of a postgresql://user@host:port/... URI's host: a proxy's `server_port`.
  static int port_of(const std::string& uri);

  int port() const { return port_; }
  /// A postgresql:// URI of the server, pointed at the proxy instead: its host and port
  /// replaced by 127.0.0.1 and port().
  std::string route(const std::string& uri) const;

  /// Statements seen since the last arming (or since construction).
  std::int64_t statements() const { return statements_.load(); }
  /// Counting from 1 again, with no fault armed.
  void reset();
  /// Counting from 1 again: the `nth` statement's connection is dropped. One drop, then the
  /// proxy forwards everything again (a healed network).
  void drop_at(std::int64_t nth, When when);
  /// Counting from 1 again: the connection of the first statement whose SQL text holds `text`
  /// is dropped.
  void drop_at(const std::string& text, When when);
  /// Counting from 1 again: when the `nth` statement arrives, `action` runs on the proxy's
  /// thread (every connection waits meanwhile); then the statement goes on to the server.
  void pause_at(std::int64_t nth, std::function<void()> action);
  /// Whether the armed fault struck.
  bool struck() const { return struck_.load(); }
  /// The SQL of the statement it struck at (of its Parse, or of the prepared statement its Bind
  /// runs), for reports.
  std::string struck_statement() const;

 private:
  struct Link;
  enum class Fault { none, drop_before, drop_after, pause };

  void loop();
  void accept_client();
  /// Reads what the link's socket holds; false at the end of the stream or an error.
  static bool read_into(int fd, std::string& into);
  static bool write_from(int fd, std::string& from);
  void parse_client(Link& link);
  void parse_server(Link& link);
  /// A statement's messages (`batch`): counted, then forwarded, dropped or paused at.
  void statement(Link& link, std::string batch);
  void arm(Fault fault, std::int64_t nth, std::string text, std::function<void()> action);

  int server_port_;
  int port_ = 0;
  int listener_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: a byte on it ends the loop
  std::atomic<std::int64_t> statements_{0};
  std::atomic<bool> struck_{false};
  mutable std::mutex mutex_;  // guards the armed fault below
  Fault fault_ = Fault::none;
  std::int64_t nth_ = 0;
  std::string text_;
  std::function<void()> action_;
  std::string struck_statement_;
  std::vector<std::unique_ptr<Link>> links_;  // the proxy's thread's alone
  std::thread thread_;
};

}  // namespace durable::test
