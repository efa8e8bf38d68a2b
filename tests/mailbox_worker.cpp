// SPDX-License-Identifier: Apache-2.0
// A worker process for the mailbox's kill -9 test: executes one run of "inbox", which receives
// messages on topic "t" until one has not come for 10 s or `n` have, and passes each to a step
// that logs "got M" to LOG. With --hang-at M, that step's body hangs forever after logging M,
// so the test can kill -9 the process there; the run's output is printed when it ends.
//
//   durable_mailbox_worker DB LOG RUN [--hang-at M]

#include <chrono>
#include <durable/durable.hpp>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  if (argc != 4 && argc != 6) {
    std::cerr << "usage: durable_mailbox_worker DB LOG RUN [--hang-at M]\n";
    return 2;
  }
  const std::string db = argv[1], log = argv[2], run = argv[3];
  const int hang_at = argc == 6 ? std::stoi(argv[5]) : -1;
  try {
    durable::RuntimeOptions options;
    options.database = db;
    durable::Runtime runtime(options);
    runtime.add(durable::Workflow("inbox", [&](durable::Step& step, const durable::json& input) {
      durable::json got = durable::json::array();
      for (int i = 0; i < input.at("n").get<int>(); ++i) {
        const auto message = step.receive("take", "t", std::chrono::seconds(10));
        if (!message) break;
        got.push_back(step.run("log", [&] {
          std::ofstream(log, std::ios::app) << "got " << message->dump() << std::endl;
          if (*message == hang_at) {
            for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
          }
          return *message;
        }));
      }
      return got;
    }));
    const durable::RunInfo info = runtime.wait(run, std::chrono::seconds(60));
    std::cout << durable::to_string(info.status) << ' ' << info.output.dump() << std::endl;
    return info.status == durable::Status::completed ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "durable_mailbox_worker: " << e.what() << "\n";
    return 1;
  }
}
