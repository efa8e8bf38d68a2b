// The tissue-analysis pipeline: upload a slide image, cut it into tiles, run an AI model over
// every region in parallel (step.map), post-process the predictions (a step with nested steps),
// and write a report. One region's model call fails on its first attempt and is retried after a
// short backoff. Every invocation and every step body is printed, so the fan-out, the retry, the
// nesting and the replay mode are visible.
//
//   pipeline [--db FILE] [--regions N] [--replay every_step|on_recovery] [--threads N]

#include <atomic>
#include <charconv>
#include <chrono>
#include <durable/durable.hpp>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pipeline {
using durable::json;
using namespace std::chrono_literals;

// The workflow's input.
struct Slide {
  std::string image;
  int regions = 8;
};
void to_json(json& j, const Slide& s) { j = {{"image", s.image}, {"regions", s.regions}}; }
void from_json(const json& j, Slide& s) {
  j.at("image").get_to(s.image);
  j.at("regions").get_to(s.regions);
}

// A tile of the slide, as the tiler describes it.
struct Region {
  int index = 0, x = 0, y = 0, size = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Region, index, x, y, size)

// The workflow's output.
struct Report {
  std::string image, url;
  int regions = 0, annotations = 0, tumor_regions = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Report, image, url, regions, annotations, tumor_regions)

// Workflow code and step bodies (on the step threads) print at once: one line at a time, each
// stamped with the milliseconds since the program started, so overlapping bodies show.
void say(const std::string& line) {
  static const auto start = std::chrono::steady_clock::now();
  static std::mutex mutex;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  std::lock_guard lock(mutex);
  std::cout << "[" << ms.count() << " ms] " << line << std::endl;
}

// Stand-ins for the real services: storage, the tiler, the model endpoint.
std::vector<Region> cut_into_tiles(const Slide& slide) {
  say("      -> cutting " + slide.image + " into " + std::to_string(slide.regions) + " regions");
  std::vector<Region> regions;
  for (int i = 0; i < slide.regions; ++i) regions.push_back({i, (i % 4) * 512, (i / 4) * 512, 512});
  return regions;
}

json predict(const Region& region, int flaky_region) {
  static std::atomic<bool> flaked{false};
  const std::string name = "region " + std::to_string(region.index);
  say("      -> " + name + ": model call starts");
  std::this_thread::sleep_for(std::chrono::milliseconds(20 + 5 * (region.index % 4)));
  if (region.index == flaky_region && !flaked.exchange(true)) {
    say("      -> " + name + ": model endpoint timed out (transient)");
    throw std::runtime_error("model endpoint timed out on " + name);
  }
  static const char* const kLabels[] = {"tumor", "stroma", "necrosis", "normal"};
  const json prediction = {{"region", region.index},
                           {"label", kLabels[(region.index * 3 + 1) % 4]},
                           {"confidence", (60 + region.index * 37 % 40) / 100.0}};
  say("      -> " + name + ": " + prediction.dump());
  return prediction;
}

// Nested steps: post-process keeps the confident predictions, then merges them by label.
json post_process(durable::Step& step, const std::vector<json>& predictions) {
  const json kept = step.run("filter", [&] {
    json confident = json::array();
    for (const auto& p : predictions)
      if (p["confidence"].get<double>() >= 0.7) confident.push_back(p);
    say("      -> post-process/filter: kept " + std::to_string(confident.size()) + " of " +
        std::to_string(predictions.size()));
    return confident;
  });
  return step.run("merge", [&] {
    json by_label = json::object();
    for (const auto& p : kept) by_label[p["label"].get<std::string>()].push_back(p["region"]);
    say("      -> post-process/merge: " + std::to_string(by_label.size()) + " annotations");
    return by_label;
  });
}

durable::RetryPolicy quick_retry() {
  durable::RetryPolicy policy;
  policy.max_attempts = 3;
  policy.initial_backoff = 200ms;
  policy.jitter = 0;
  return policy;
}

durable::Workflow workflow() {
  return durable::Workflow("tissue-analysis", [](durable::Step& step, const Slide& slide) {
    static std::atomic<int> invocation{0};
    say("invocation " + std::to_string(++invocation) + (step.replaying() ? " (replaying)" : ""));
    const std::string uri = step.run("upload-image", [&] {
      say("      -> uploading " + slide.image);
      return "s3://slides/" + slide.image;
    });
    say("    upload-image   -> " + uri);
    const auto regions = step.run("generate-tiles", [&] { return cut_into_tiles(slide); });
    say("    generate-tiles -> " + std::to_string(regions.size()) + " regions");
    const int flaky = slide.regions / 2;
    const auto predictions =
        step.map("predict", regions, [flaky](const Region& r) { return predict(r, flaky); },
                 {.retry = quick_retry()});
    say("    predict[0.." + std::to_string(regions.size() - 1) + "] -> " +
        std::to_string(predictions.size()) + " predictions");
    const json annotations =
        step.run("post-process", [&] { return post_process(step, predictions); });
    say("    post-process   -> " + annotations.dump());
    const Report report = step.run("report", [&] {
      say("      -> writing the report for " + uri);
      const int tumor = annotations.contains("tumor") ? int(annotations["tumor"].size()) : 0;
      return Report{slide.image, "reports/" + slide.image + ".pdf", int(regions.size()),
                    int(annotations.size()), tumor};
    });
    say("    report         -> " + report.url);
    return report;
  });
}

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
    durable::Runtime runtime(options);
    runtime.add(pipeline::workflow());
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
