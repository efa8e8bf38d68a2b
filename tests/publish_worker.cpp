// SPDX-License-Identifier: Apache-2.0
// A process that publishes, for the tests and the bench of waits across processes
// (Runtime::published): it serves the workflow "publisher" on DB until run RUN ends, and exits 0
// when it completed. "publisher" sleeps input "delay_ms" (default 0), then publishes input
// "value" under "phase" (for the bench, one key per round: "phase-0", "phase-1"... when input
// "rounds" is set, each after the event "round" with {"n": i}); with input "stream": true it
// also writes the value to the stream "out" and closes it; it returns "done".
//
//   durable_publish_worker DB RUN

#include <durable/durable.hpp>
#include <iostream>
#include <string>

namespace {

durable::Workflow publisher() {
  return durable::Workflow("publisher", [](durable::Step& step, const durable::json& input) {
    step.sleep("delay", std::chrono::milliseconds(input.value("delay_ms", 0)));
    const int rounds = input.value("rounds", 0);
    if (rounds == 0) step.publish("phase", input.value("value", durable::json("ready")));
    if (input.value("stream", false)) {
      step.write_stream("out", input.value("value", durable::json("ready")));
      step.close_stream("out");
    }
    for (int i = 0; i < rounds; ++i) {
      durable::WaitOptions wait{.timeout = std::chrono::minutes(5), .match = {{"n", i}}};
      if (!step.wait_for_event("round", "round", wait)) return durable::json("timed out");
      step.publish("phase-" + std::to_string(i), i);
    }
    return durable::json("done");
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: durable_publish_worker DB RUN\n";
    return 2;
  }
  try {
    durable::RuntimeOptions opts;
    opts.database = argv[1];
    opts.log_level = durable::LogLevel::off;
    opts.poll_interval = std::chrono::milliseconds(5);
    durable::Runtime runtime(opts);
    runtime.add(publisher());
    const durable::RunInfo run = runtime.wait(argv[2], std::chrono::minutes(5));
    return run.status == durable::Status::completed ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "durable_publish_worker: " << e.what() << "\n";
    return 1;
  }
}
