// SPDX-License-Identifier: Apache-2.0
// The file under a steady workload, with RuntimeOptions::retention and without (issue 15): runs
// of three steps are started at a steady pace and served; every tenth of the runs, the size of
// the file (with its WAL) is printed beside the same workload's file with no retention, and
// beside the pages SQLite holds free for reuse. With retention the file should stop growing once
// the runs it keeps are replaced as fast as they end.
//
//   durable_retention_bench [--quick] [--runs N] [--dir DIR]

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "bench_support.hpp"

namespace {

using namespace durable::bench;
using namespace std::chrono_literals;

struct Point {
  std::size_t done = 0;
  double file_mb = 0, free_mb = 0;
  std::size_t kept = 0;  // runs in the file
};

// Starts `runs` runs in batches and serves them; every tenth of them, where the file stands.
std::vector<Point> measure(const std::string& db, std::chrono::milliseconds retention,
                           std::size_t runs) {
  durable::RuntimeOptions opts;
  opts.database = db;
  opts.log_level = durable::LogLevel::off;
  opts.retention = retention;
  opts.poll_interval = 20ms;
  durable::Runtime runtime(opts);
  std::atomic<std::size_t> done{0};
  runtime.add(durable::Workflow("job", [&done](durable::Step& step, const json& input) -> json {
    const int order = step.run("load", [&] { return input.value("n", 0); });
    const json priced = step.run("price", [&] { return json{{"order", order}, {"total", 42.5}}; });
    step.run("receipt", [&] { return json{{"sent", true}, {"priced", priced}}; });
    ++done;
    return nullptr;
  }));
  std::thread serving([&] { runtime.serve(); });
  std::vector<Point> curve;
  const std::size_t every = std::max<std::size_t>(runs / 10, 1);
  constexpr std::size_t kBatch = 200;
  std::size_t started = 0;
  while (curve.size() < 10) {
    // Keep about two batches in flight: a steady workload, not a backlog.
    if (started < runs && started - done.load() < 2 * kBatch) {
      for (std::size_t i = 0; i < kBatch && started < runs; ++i, ++started) {
        runtime.start("job", {{"n", started}});
      }
      continue;
    }
    if (done.load() >= every * (curve.size() + 1)) {
      Point p;
      p.done = done.load();
      p.file_mb = static_cast<double>(file_bytes(db)) / 1e6;
      p.kept = runtime.count({});
      {
        SQLite::Database file(db, SQLite::OPEN_READONLY);
        const double page = file.execAndGet("PRAGMA page_size").getDouble();
        p.free_mb = file.execAndGet("PRAGMA freelist_count").getDouble() * page / 1e6;
      }
      curve.push_back(p);
      continue;
    }
    std::this_thread::sleep_for(2ms);
  }
  runtime.stop();
  serving.join();
  return curve;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t runs = 100'000;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      runs = 4'000;
    } else if (arg == "--runs" && i + 1 < argc) {
      runs = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::cerr << "usage: durable_retention_bench [--quick] [--runs N] [--dir DIR]\n";
      return 2;
    }
  }
  Scratch scratch(dir, "durable-retention");
  const auto retention = 2s;
  std::cout << "retention: " << runs << " runs of 3 steps, about " << 2 * 200 << " in flight, on "
            << file_system_of(scratch.dir()) << "\n"
            << "file = the database and its WAL, in MB; kept = runs in the file\n\n";
  const auto start = Stopwatch::now();
  const std::vector<Point> kept = measure(scratch.fresh("retention"), retention, runs);
  const double with_seconds = seconds_since(start);
  const auto start_raw = Stopwatch::now();
  const std::vector<Point> all = measure(scratch.fresh("no-retention"), 0ms, runs);
  const double raw_seconds = seconds_since(start_raw);
  std::printf("%10s | %14s %8s %12s | %16s %8s\n", "runs done", "file, 2 s ret.", "kept",
              "free pages", "file, no ret.", "kept");
  for (std::size_t i = 0; i < kept.size() && i < all.size(); ++i) {
    std::printf("%10zu | %11.1f MB %8zu %9.1f MB | %13.1f MB %8zu\n", kept[i].done, kept[i].file_mb,
                kept[i].kept, kept[i].free_mb, all[i].file_mb, all[i].kept);
  }
  std::printf("\n%.0f runs/s with retention, %.0f runs/s without (medians of one run each)\n",
              static_cast<double>(runs) / with_seconds, static_cast<double>(runs) / raw_seconds);
  return 0;
}
