// SPDX-License-Identifier: Apache-2.0
// A worker process for the crash tests: runs the "crashy" workflow on a database file and logs
// each step body it executes, one line each, to a log file. With --hang, the third step's body
// blocks forever after logging, so the test can kill -9 the process in the middle of the run.
//
//   durable_crash_worker DB LOG start [--hang] [--on-recovery]   start a run, then execute
//   durable_crash_worker DB LOG resume [--on-recovery]           execute what is due (recovery)

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <durable/durable.hpp>
#include <fstream>
#include <iostream>
#include <thread>

namespace {

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void log_line(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << ' ' << now_ms() << '\n';
  out.flush();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: durable_crash_worker DB LOG start|resume [--hang] [--on-recovery]\n";
    return 2;
  }
  const std::string db = argv[1], log = argv[2], mode = argv[3];
  bool hang = false, on_recovery = false;
  for (int i = 4; i < argc; ++i) {
    hang = hang || std::strcmp(argv[i], "--hang") == 0;
    on_recovery = on_recovery || std::strcmp(argv[i], "--on-recovery") == 0;
  }
  log_line(log, "process " + mode);

  durable::RuntimeOptions options;
  options.database = db;
  options.replay = on_recovery ? durable::Replay::on_recovery : durable::Replay::every_step;
  durable::Runtime runtime(options);
  runtime.add(durable::Workflow("crashy", [&](durable::Step& step, const durable::json&) {
    const int a = step.run("step1", [&] {
      log_line(log, "body step1");
      return 1;
    });
    const int b = step.run("step2", [&] {
      log_line(log, "body step2");
      return a + 1;
    });
    const int c = step.run("step3", [&] {
      log_line(log, "body step3");
      if (hang) {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      return b + 1;
    });
    return step.run("step4", [&] {
      log_line(log, "body step4");
      return c + 1;
    });
  }));
  if (mode == "start") std::cout << runtime.start("crashy") << std::endl;
  runtime.run_until_idle();
  log_line(log, "process done");
  return 0;
}
