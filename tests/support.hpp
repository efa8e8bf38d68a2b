// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by the tests: temporary directories, a clock the test moves by hand, and the
// durable command run in a shell or serving in a child process.

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <durable/durable.hpp>
#include <exception>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime_core.hpp"

namespace durable::test {

/// Whether `part` occurs in `text`: for checks of a message or a command's output.
inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// Waits until `done` holds, looking every `poll`, for at most `timeout`; whether it held.
template <class F>
bool eventually(F&& done, std::chrono::milliseconds timeout = std::chrono::seconds(20),
                std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

/// serve() on a thread for the scope of the object; stop() and join at its end. error(): what
/// serve() threw, if it did.
class Serving {
 public:
  explicit Serving(Runtime& runtime) : runtime_(&runtime), thread_([this] { run(); }) {}
  ~Serving() {
    runtime_->stop();
    thread_.join();
  }
  Serving(const Serving&) = delete;
  Serving& operator=(const Serving&) = delete;
  std::exception_ptr error() const { return error_; }

 private:
  void run() {
    try {
      runtime_->serve();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  Runtime* runtime_;
  std::exception_ptr error_;
  std::thread thread_;
};

/// A fresh directory under /tmp, removed with everything in it at the end of the scope.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "durable-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// A clock that stands still until the test moves it; shared by the runtimes it is attached to.
/// Safe to read from the runtime's own threads (its lease heartbeat) while the test moves it.
class ManualClock {
 public:
  Clock::time_point now() const { return env_->now(); }
  void advance(std::chrono::milliseconds d) {
    env_->advance(std::chrono::duration_cast<Clock::duration>(d));
  }
  /// The runtime's Env becomes this clock's (src/env.hpp), before it starts its threads.
  void attach(Runtime& runtime) { detail::RuntimeAccess::core(runtime).set_env(env_); }
  detail::Env& env() const { return *env_; }

 private:
  std::shared_ptr<detail::ManualClockEnv> env_ = std::make_shared<detail::ManualClockEnv>(
      Clock::time_point(std::chrono::hours(24 * 365 * 56)));  // ~2026
};

/// The time passed since `began`, in milliseconds.
inline std::chrono::milliseconds since(std::chrono::steady_clock::time_point began) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               began);
}

/// Options for a runtime on the file `db` that logs nothing.
inline RuntimeOptions quiet(const std::string& db) {
  RuntimeOptions opts;
  opts.database = db;
  opts.log_level = LogLevel::off;
  return opts;
}

/// A runtime on a file in `dir`, with a manual clock.
inline std::unique_ptr<Runtime> runtime_on(const std::string& db, ManualClock& clock,
                                           RuntimeOptions opts = {}) {
  opts.database = db;
  auto runtime = std::make_unique<Runtime>(opts);
  clock.attach(*runtime);
  return runtime;
}

/// Starts a run of `before` on the file and runs it as far as it goes now, then closes that
/// runtime: what a deploy or restart finds. Returns the run's id.
inline std::string run_before_restart(const std::string& db, ManualClock& clock, Workflow before) {
  auto runtime = runtime_on(db, clock);
  const std::string name = before.name();
  runtime->add(std::move(before));
  const std::string id = runtime->start(name);
  runtime->run_until_idle();
  return id;
}

/// A runtime on the file with `after` added (the code after a deploy or restart).
inline std::unique_ptr<Runtime> restart_with(const std::string& db, ManualClock& clock,
                                             Workflow after, RuntimeOptions opts = {}) {
  auto runtime = runtime_on(db, clock, std::move(opts));
  runtime->add(std::move(after));
  return runtime;
}

/// A retry policy with no jitter, for exact backoff arithmetic.
inline RetryPolicy exact_policy(int attempts, std::chrono::milliseconds initial) {
  RetryPolicy policy;
  policy.max_attempts = attempts;
  policy.initial_backoff = initial;
  policy.jitter = 0;
  return policy;
}

/// A retry policy that retries at once (1 ms, no jitter), for tests that only count attempts.
inline RetryPolicy quick_retries(int attempts) {
  return exact_policy(attempts, std::chrono::milliseconds(1));
}

/// Runs a shell command line; returns its exit code (-1: it did not exit) and what it printed on
/// stdout.
inline std::pair<int, std::string> run_shell(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed for: " + command);
  std::string out;
  std::array<char, 4096> buffer{};
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) {
    out.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

/// run_shell with stderr joined to stdout: its exit code and all it printed.
inline std::pair<int, std::string> shell(const std::string& command) {
  return run_shell(command + " 2>&1");
}

/// `cli [before...] --db db serve --port 0` (the durable command; `before`: the words an
/// application that embeds it takes first) in a child process, its stdout on a pipe the test
/// reads: through out() or through fd(), not both (out() buffers). stop() sends SIGTERM, waits
/// and returns the wait status; the end of the scope stops it if the test did not, then closes
/// the pipe.
class ServeProcess {
 public:
  ServeProcess(const std::string& cli, const std::string& db,
               const std::vector<std::string>& before = {},
               const std::vector<std::string>& after = {}) {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> words = {cli};
    words.insert(words.end(), before.begin(), before.end());
    for (const char* word : {"--db", db.c_str(), "serve", "--port", "0"}) words.emplace_back(word);
    words.insert(words.end(), after.begin(), after.end());
    std::vector<char*> argv;
    for (std::string& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      throw std::runtime_error("fork failed");
    }
    if (pid_ == 0) {
      ::dup2(pipe_fds[1], STDOUT_FILENO);
      ::close(pipe_fds[0]);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(pipe_fds[1]);
    out_ = ::fdopen(pipe_fds[0], "r");
    if (out_ == nullptr) {
      ::close(pipe_fds[0]);
      stop();
      throw std::runtime_error("fdopen failed");
    }
  }
  ~ServeProcess() {
    stop();
    if (out_ != nullptr) std::fclose(out_);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  FILE* out() const { return out_; }
  int fd() const { return ::fileno(out_); }
  int stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, &status_, 0);
      pid_ = -1;
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int status_ = 0;
};

}  // namespace durable::test
