// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tissue-analysis pipeline of this sample, shared by main.cpp and pipeline_test.cpp: its
// input and output types, the stand-ins for the services it calls (storage, the tiler, the model
// endpoint) with the console they print to, and the workflow `tissue-analysis`.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <durable/durable.hpp>
#include <iostream>
#include <mutex>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace pipeline {
using durable::json;

// The workflow's input.
struct Slide {
  std::string image;
  int regions = 8;
};
inline void to_json(json& j, const Slide& s) { j = {{"image", s.image}, {"regions", s.regions}}; }
inline void from_json(const json& j, Slide& s) {
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

// Stand-ins for the real services (storage, the tiler, the model endpoint) and the console where
// the workflow and they print what they do. The workflow holds it by reference, so it must
// outlive the runtime. Safe to call from any thread: step bodies run on the step threads.
class Services {
 public:
  // Lines go to `out` (nullptr: nowhere), one at a time, each stamped with the milliseconds since
  // the first, so overlapping bodies show. The model call for region `flaky_region` times out on
  // its first attempt, once in this object's life; -1: no call times out.
  explicit Services(std::ostream* out = &std::cout, int flaky_region = -1)
      : out_(out), flaky_region_(flaky_region) {}
  Services(const Services&) = delete;
  Services& operator=(const Services&) = delete;

  void say(const std::string& line) {
    if (out_ == nullptr) return;
    std::lock_guard lock(out_mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (!start_) start_ = now;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - *start_);
    *out_ << "[" << ms.count() << " ms] " << line << std::endl;
  }

  // The number of the workflow invocation beginning now, counted over this object's life.
  int next_invocation() { return ++invocations_; }

  // The tiler: one 512-pixel tile per region, four to a row.
  std::vector<Region> cut_into_tiles(const Slide& slide) {
    say("      -> cutting " + slide.image + " into " + std::to_string(slide.regions) + " regions");
    std::vector<Region> regions;
    for (int i = 0; i < slide.regions; ++i) {
      regions.push_back({i, (i % 4) * 512, (i / 4) * 512, 512});
    }
    return regions;
  }

  // The model endpoint: a call takes 20-35 ms and labels the region.
  json predict(const Region& region) {
    const InFlight call(*this);
    const std::string name = "region " + std::to_string(region.index);
    say("      -> " + name + ": model call starts");
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 5 * (region.index % 4)));
    if (region.index == flaky_region_ && !flaked_.exchange(true)) {
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

  // What the model endpoint saw: the calls made, and the most of them in flight at one time.
  int model_calls() const { return model_calls_; }
  int most_model_calls_at_once() const { return most_at_once_; }

 private:
  // Counts a model call while it is in flight.
  class InFlight {
   public:
    explicit InFlight(Services& services) : services_(services) {
      ++services_.model_calls_;
      const int now = ++services_.in_flight_;
      int most = services_.most_at_once_;
      while (now > most && !services_.most_at_once_.compare_exchange_weak(most, now)) {
      }
    }
    ~InFlight() { --services_.in_flight_; }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    Services& services_;
  };

  std::ostream* out_;
  const int flaky_region_;
  std::mutex out_mutex_;
  std::optional<std::chrono::steady_clock::time_point> start_;  // of the first line
  std::atomic<int> invocations_{0};
  std::atomic<bool> flaked_{false};
  std::atomic<int> model_calls_{0}, in_flight_{0}, most_at_once_{0};
};

// Nested steps: post-process keeps the confident predictions, then merges them by label.
inline json post_process(durable::Step& step, const std::vector<json>& predictions,
                         Services& services) {
  const json kept = step.run("filter", [&] {
    json confident = json::array();
    for (const auto& p : predictions)
      if (p["confidence"].get<double>() >= 0.7) confident.push_back(p);
    services.say("      -> post-process/filter: kept " + std::to_string(confident.size()) + " of " +
                 std::to_string(predictions.size()));
    return confident;
  });
  return step.run("merge", [&] {
    json by_label = json::object();
    for (const auto& p : kept) by_label[p["label"].get<std::string>()].push_back(p["region"]);
    services.say("      -> post-process/merge: " + std::to_string(by_label.size()) +
                 " annotations");
    return by_label;
  });
}

// The model calls' policy: 3 attempts, 200 ms apart at first, without jitter.
inline durable::RetryPolicy quick_retry() {
  durable::RetryPolicy policy;
  policy.max_attempts = 3;
  policy.initial_backoff = std::chrono::milliseconds(200);
  policy.jitter = 0;
  return policy;
}

inline durable::Workflow workflow(Services& services) {
  return durable::Workflow("tissue-analysis", [&services](durable::Step& step, const Slide& slide) {
    services.say("invocation " + std::to_string(services.next_invocation()) +
                 (step.replaying() ? " (replaying)" : ""));
    const std::string uri = step.run("upload-image", [&] {
      services.say("      -> uploading " + slide.image);
      return "s3://slides/" + slide.image;
    });
    services.say("    upload-image   -> " + uri);
    const auto regions = step.run("generate-tiles", [&] { return services.cut_into_tiles(slide); });
    services.say("    generate-tiles -> " + std::to_string(regions.size()) + " regions");
    const auto predictions =
        step.map("predict", regions, [&services](const Region& r) { return services.predict(r); },
                 {.retry = quick_retry()});
    services.say("    predict[0.." + std::to_string(regions.size() - 1) + "] -> " +
                 std::to_string(predictions.size()) + " predictions");
    const json annotations =
        step.run("post-process", [&] { return post_process(step, predictions, services); });
    services.say("    post-process   -> " + annotations.dump());
    const Report report = step.run("report", [&] {
      services.say("      -> writing the report for " + uri);
      const int tumor = annotations.contains("tumor") ? int(annotations["tumor"].size()) : 0;
      return Report{slide.image, "reports/" + slide.image + ".pdf", int(regions.size()),
                    int(annotations.size()), tumor};
    });
    services.say("    report         -> " + report.url);
    return report;
  });
}

}  // namespace pipeline
