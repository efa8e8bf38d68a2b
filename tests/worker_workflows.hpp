// SPDX-License-Identifier: Apache-2.0
#pragma once
// The workflows of the serving-worker tests, shared by the test process (which starts runs) and
// durable_serve_worker (which executes them). Every step body appends "RUN STEP PID" to a log
// file, so the test can count the bodies that ran.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <durable/durable.hpp>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace durable::test {

// One line per body, written with one write() on an O_APPEND file: lines of several processes
// never interleave, and a line is either whole or absent after a kill -9.
inline void log_body(const std::string& path, const std::string& what) {
  const std::string line = what + " " + std::to_string(::getpid()) + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
}

/// One line of the log: the run, the step (or what log_body was given) and the process.
struct Body {
  std::string run, step;
  int pid = 0;
};

inline std::vector<Body> read_bodies(const std::string& path) {
  std::vector<Body> bodies;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Body body;
    if (fields >> body.run >> body.step >> body.pid) bodies.push_back(body);
  }
  return bodies;
}

/// How many times the body of each (run, step) ran.
inline std::map<std::pair<std::string, std::string>, int> bodies_by_step(const std::string& path) {
  std::map<std::pair<std::string, std::string>, int> runs_of;
  for (const Body& body : read_bodies(path)) ++runs_of[{body.run, body.step}];
  return runs_of;
}

/// The runs of bodies beyond each one's first.
inline int bodies_run_again(const std::map<std::pair<std::string, std::string>, int>& runs_of) {
  int again = 0;
  for (const auto& entry : runs_of) again += entry.second - 1;
  return again;
}

// "job": ten steps s0..s9, each input["ms"] (default 2) milliseconds of work; the output is the
// sum 0 + ... + 9.
inline Workflow job_workflow(const std::string& log) {
  return Workflow("job", [log](Step& step, const json& input) -> json {
    const int ms = input.value("ms", 2);
    int sum = 0;
    for (int i = 0; i < 10; ++i) {
      std::string id = "s";
      id += std::to_string(i);  // not `"s" + to_string(i)`: GCC 12 -O3 warns -Wrestrict falsely
      sum += step.run(id, [&] {
        log_body(log, std::string(step.run_id()) + " " + id);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        return i;
      });
    }
    return sum;
  });
}

// "slow": two steps whose bodies take 600 ms each, logging when they begin and end.
inline Workflow slow_workflow(const std::string& log) {
  return Workflow("slow", [log](Step& step, const json&) -> json {
    for (const char* id : {"first", "second"}) {
      step.run(id, [&] {
        log_body(log, std::string(step.run_id()) + " begin-" + id);
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        log_body(log, std::string(step.run_id()) + " end-" + id);
        return true;
      });
    }
    return "done";
  });
}

// "poison": its one step kills its own process with SIGKILL, as a segmentation fault, a stack
// overflow or the out-of-memory killer would: whatever worker claims it dies.
inline Workflow poison_workflow(const std::string& log) {
  return Workflow("poison", [log](Step& step, const json&) -> json {
    step.run("boom", [&] {
      log_body(log, std::string(step.run_id()) + " boom");
      ::kill(::getpid(), SIGKILL);
      return 0;
    });
    return "survived";
  });
}

// "fanout": a map over 8 items; items 0-2 take 100 ms, items 3-7 input["slow_ms"] (default
// 4,000 ms). Each body logs "RUN item-I" as it begins; the output is the sum 0 + ... + 7.
inline Workflow fanout_workflow(const std::string& log) {
  return Workflow("fanout", [log](Step& step, const json& input) -> json {
    const int slow_ms = input.value("slow_ms", 4000);
    const std::vector<int> items{0, 1, 2, 3, 4, 5, 6, 7};
    const std::vector<int> done = step.map("item", items, [&](int i) {
      std::string what(step.run_id());
      what += " item-";
      what += std::to_string(i);
      log_body(log, what);
      std::this_thread::sleep_for(std::chrono::milliseconds(i < 3 ? 100 : slow_ms));
      return i;
    });
    int sum = 0;
    for (const int i : done) sum += i;
    return sum;
  });
}

// "transfers": five transfers of input["amount"] between input["from"] and input["to"], each
// in step.transaction, each recording itself in `applied` (no key: a transfer applied twice
// leaves two rows) and holding its transaction input["ms"] (default 5) milliseconds, so that
// kills land inside transactions too. Its bodies log "RUN tN" as they begin.
inline Workflow transfers_workflow(const std::string& log) {
  return Workflow("transfers", [log](Step& step, const json& input) -> json {
    const int ms = input.value("ms", 5);
    for (int i = 0; i < 5; ++i) {
      std::string id = "t";
      id += std::to_string(i);
      step.transaction(id, [&](Sql& sql) {
        log_body(log, std::string(step.run_id()) + " " + id);
        const int amount = input.at("amount").get<int>();
        sql.exec("UPDATE accounts SET balance = balance - $1 WHERE id = $2", amount,
                 input.at("from").get<std::string>());
        sql.exec("UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount,
                 input.at("to").get<std::string>());
        sql.exec("INSERT INTO applied (transfer) VALUES ($1)", std::string(step.run_id()) + "/" + id);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      });
    }
    return "moved";
  });
}

}  // namespace durable::test
