// SPDX-License-Identifier: Apache-2.0
#pragma once
// The durable command as the benchmarks meet it: a process run to its end (timed whole), and
// `durable serve` as a child process on a free loopback port, asked over a blocking HTTP/1.1
// connection per request. Errors throw std::runtime_error with the command's own message.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace durable::bench {

namespace child_detail {

inline std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  return argv;
}

inline std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::string command_line(const std::vector<std::string>& args) {
  std::string text;
  for (const std::string& arg : args) text += (text.empty() ? "" : " ") + arg;
  return text;
}

// Spawns `args` with stdout to `out` (a path, or the write end of a pipe when out_fd >= 0) and
// stderr to `err`; returns the pid.
inline pid_t spawn(std::vector<std::string> args, const std::string& out, int out_fd,
                   const std::string& err) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  std::vector<char*> argv = argv_of(args);
  const int failed = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (failed != 0) throw std::runtime_error("cannot run " + args[0]);
  return pid;
}

}  // namespace child_detail

/// Runs `args` (args[0] a path) to its end, its output to /dev/null and its errors to `err`;
/// throws with those errors unless it exits 0.
inline void run_process(const std::vector<std::string>& args, const std::string& err) {
  const pid_t pid = child_detail::spawn(args, "/dev/null", -1, err);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("`" + child_detail::command_line(args) + "` failed (status " +
                             std::to_string(status) + "): " + child_detail::contents(err));
  }
}

struct HttpAnswer {
  int status = 0;
  std::string body;
};

/// GET `target` from 127.0.0.1:`port` on a connection of its own (Connection: close), read to the
/// end. A read gives up after `timeout`.
inline HttpAnswer http_get(unsigned short port, const std::string& target,
                           std::chrono::seconds timeout = std::chrono::seconds(600)) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  timeval limit{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string text;
  try {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("cannot connect to port " + std::to_string(port));
    }
    const std::string request =
        "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    for (std::size_t sent = 0; sent < request.size();) {
      const auto n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      sent += static_cast<std::size_t>(n);
    }
    char chunk[65536];
    for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) != 0;) {
      if (n < 0) throw std::runtime_error("GET " + target + ": no answer in time");
      text.append(chunk, static_cast<std::size_t>(n));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  const auto head_end = text.find("\r\n\r\n");
  if (!text.starts_with("HTTP/1.1 ") || head_end == std::string::npos) {
    throw std::runtime_error("GET " + target + ": not an HTTP response");
  }
  std::string head = text.substr(0, head_end);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    throw std::runtime_error("GET " + target +
                             ": a chunked response, which this client cannot read");
  }
  return HttpAnswer{std::stoi(text.substr(9, 3)), text.substr(head_end + 4)};
}

/// `durable --db DATABASE serve --port 0` as a child process, stopped (SIGTERM) when destroyed.
class ServeChild {
 public:
  ServeChild(const std::string& cli, const std::string& database, const std::string& err) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe() failed");
    pid_ = child_detail::spawn({cli, "--db", database, "serve", "--port", "0"}, "", fds[1], err);
    ::close(fds[1]);
    out_ = fdopen(fds[0], "r");
    // Its first line: "durable: serving DATABASE at http://127.0.0.1:PORT (...)".
    char line[4096];
    if (out_ == nullptr || std::fgets(line, sizeof line, out_) == nullptr) {
      stop();
      throw std::runtime_error("durable serve printed no address: " + child_detail::contents(err));
    }
    const std::string text = line;
    const auto at = text.find("http://127.0.0.1:");
    if (at == std::string::npos) {
      stop();
      throw std::runtime_error("durable serve printed no address: " + text);
    }
    port_ = static_cast<unsigned short>(std::stoi(text.substr(at + 17)));
  }
  ~ServeChild() { stop(); }
  ServeChild(const ServeChild&) = delete;
  ServeChild& operator=(const ServeChild&) = delete;

  unsigned short port() const { return port_; }

 private:
  // SIGTERM, then SIGKILL if it has not ended within 10 s.
  void stop() noexcept {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (waitpid(pid_, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          kill(pid_, SIGKILL);
          waitpid(pid_, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      pid_ = 0;
    }
    if (out_ != nullptr) std::fclose(out_);
    out_ = nullptr;
  }

  pid_t pid_ = 0;
  FILE* out_ = nullptr;
  unsigned short port_ = 0;
};

}  // namespace durable::bench
