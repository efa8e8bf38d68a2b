// SPDX-License-Identifier: Apache-2.0
// The sample's own small web server: it serves the progress page at / and relays every other
// request, as it is, to the runtime's HTTP API. The page and the API then share one origin, which
// the API asks of a browser page (it refuses requests from another site), and the page reads the
// stream with a plain EventSource.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace progress {

class PageServer {
 public:
  /// Listens on 127.0.0.1:`port` (0: any free port) and serves `page` at /, relaying the rest to
  /// the API on 127.0.0.1:`api_port`. Throws std::runtime_error when it cannot listen.
  PageServer(std::string page, unsigned short port, unsigned short api_port);
  /// Stops listening, ends the connections and joins their threads.
  ~PageServer();
  PageServer(const PageServer&) = delete;
  PageServer& operator=(const PageServer&) = delete;

  /// The port it listens on.
  unsigned short port() const { return port_; }

 private:
  void accept_connections();
  void serve_connection(int client);
  void relay(int client, std::string head);

  std::string page_;
  unsigned short api_port_;
  int listener_ = -1;
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  // A connection's thread, and whether it has finished: the acceptor joins finished ones (a
  // thread not joined keeps its stack), the destructor the rest.
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Connection> connections_;  // the acceptor's, then the destructor's
  std::thread acceptor_;
};

}  // namespace progress
