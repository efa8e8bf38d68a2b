// SPDX-License-Identifier: Apache-2.0
// The tissue-analysis pipeline: upload a slide image, cut it into tiles, run an AI model over
// every region in parallel (step.map), post-process the predictions (a step with nested steps),
// and write a report. One region's model call fails on its first attempt and is retried after a
// short backoff. Every invocation and every step body is printed, so the fan-out, the retry, the
// nesting and the replay mode are visible.
//
//   pipeline [--db FILE] [--regions N] [--replay every_step|on_recovery] [--threads N]
//
// The workflow and the stand-ins for its services are in pipeline.hpp, which the unit tests in
// pipeline_test.cpp share.

#include <charconv>
#include <chrono>
#include <durable/durable.hpp>
#include <iostream>
#include <string>

#include "pipeline.hpp"

namespace pipeline {

void print_run(durable::Runtime& runtime, const durable::RunInfo& run) {
  std::cout << "\nrun " << run.id << ": " << durable::to_string(run.status) << " after "
            << run.invocations << " invocations\noutput: " << run.output.dump() << "\n\njournal:\n";
  for (const auto& s : runtime.steps(run.id)) {
    std::cout << "  " << s.id << " (" << s.kind << ", " << s.status << ", " << s.attempts
              << " attempt" << (s.attempts == 1 ? "" : "s") << ")";
    if (s.error) std::cout << " last error: " << s.error->message;
    std::cout << "\n";
  }
}

// A flag's number, or -1 when the text is not a whole non-negative number.
int to_count(const std::string& text) {
  int n = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  return error == std::errc() && end == text.data() + text.size() && n >= 0 ? n : -1;
}

int usage(const std::string& bad) {
  std::cerr << "pipeline: bad flag '" << bad << "'\nusage: pipeline [--db FILE] [--regions N] "
            << "[--replay every_step|on_recovery] [--threads N]\n";
  return 2;
}

}  // namespace pipeline

int main(int argc, char** argv) {
  durable::RuntimeOptions options;
  options.database = "pipeline.db";
  pipeline::Slide slide{"slide-0042.svs", 8};
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 == argc) return pipeline::usage(argv[i]);
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--db") {
      options.database = value;
    } else if (flag == "--regions" && pipeline::to_count(value) > 0) {
      slide.regions = pipeline::to_count(value);
    } else if (flag == "--threads" && pipeline::to_count(value) >= 0) {
      options.threads = pipeline::to_count(value);
    } else if (flag == "--replay" && (value == "every_step" || value == "on_recovery")) {
      options.replay =
          value == "every_step" ? durable::Replay::every_step : durable::Replay::on_recovery;
    } else {
      return pipeline::usage(flag + " " + value);
    }
  }
  try {
    // The middle region's model call times out once. The services outlive the runtime.
    pipeline::Services services(&std::cout, slide.regions / 2);
    durable::Runtime runtime(options);
    runtime.add(pipeline::workflow(services));
    durable::StartOptions start;
    start.idempotency_key = slide.image + ":" + std::to_string(slide.regions);
    const std::string id = runtime.start("tissue-analysis", slide, start);
    std::cout << "run " << id << ": " << slide.image << ", " << slide.regions << " regions, "
              << (options.replay == durable::Replay::every_step ? "every_step" : "on_recovery")
              << " replay, on " << options.database << "\n\n";
    const durable::RunInfo run = runtime.wait(id, std::chrono::minutes(5));
    pipeline::print_run(runtime, run);
    return run.status == durable::Status::completed ? 0 : 1;
  } catch (const durable::Error& e) {
    std::cerr << "pipeline: " << e.what() << "\n";
    return 1;
  }
}
