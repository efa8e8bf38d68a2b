// SPDX-License-Identifier: Apache-2.0
// durable_encryption_bench: what built-in encryption (RuntimeOptions::encryption_key_file) costs
// W1, beside raw SQLite commits measured in the same run on the same file system.
//
//   durable_encryption_bench [--quick] [DIR]
//
// W1 one at a time (workloads_bench.cpp): kW1Runs runs of kW1Steps trivial steps, one after
// another, durability normal, replay every_step; each run with a correlation id of its own, so
// each makes a data key. Each repetition measures raw commits, then W1 with encryption off, then
// on, back to back, so a slow phase of the machine hits all alike; a figure is the median over
// repetitions. The target (issue 23): encryption costs at most 10% of W1's steps/s.

#include <cstdio>
#include <cstring>
#include <durable/durable.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "bench_support.hpp"

namespace {

using namespace durable::bench;
using namespace durable::bench::workloads;

// Seconds for `runs` W1 runs on a fresh file, encrypted with `keys` when it is not empty.
double w1_seconds(Scratch& scratch, const std::string& keys, int runs, int steps) {
  const std::string path = scratch.fresh("w1");
  double elapsed = 0;
  {
    durable::RuntimeOptions options;
    options.database = path;
    options.log_level = durable::LogLevel::off;
    options.encryption_key_file = keys;
    durable::Runtime runtime(options);
    runtime.add(loop_workflow());
    const json input{{"steps", steps}};
    const auto start = Stopwatch::now();
    for (int i = 0; i < runs; ++i) {
      runtime.start("loop", input, {.correlation_id = "customer-" + std::to_string(i)});
      runtime.run_until_idle();
    }
    elapsed = seconds_since(start);
    const auto done = runtime.list({.status = durable::Status::completed, .limit = 100'000});
    if (static_cast<int>(done.size()) != runs)
      throw std::runtime_error("a W1 run did not complete");
  }
  Scratch::remove(path);
  return elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "usage: durable_encryption_bench [--quick] [DIR]\n");
      return 2;
    } else {
      dir = argv[i];
    }
  }
  const int reps = quick ? 1 : 5, runs = quick ? 10 : kW1Runs, raw_rows = quick ? 100 : 3000;
  Scratch scratch(dir, "durable-encryption");
  const std::string keys = (scratch.dir() / "keys").string();
  std::ofstream(keys) << "k1:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n";
  std::printf("durable_encryption_bench %s, %s, in %s (%s); median of %d repetition(s)\n",
              std::string(durable::version()).c_str(), utc_now().c_str(), scratch.dir().c_str(),
              file_system_of(scratch.dir()).c_str(), reps);
  std::vector<double> raw, off, on, slower;
  try {
    for (int rep = 0; rep < reps; ++rep) {
      raw.push_back(raw_insert_rate(scratch, Durability::normal, raw_rows));
      const double plain = runs * kW1Steps / w1_seconds(scratch, "", runs, kW1Steps);
      const double sealed = runs * kW1Steps / w1_seconds(scratch, keys, runs, kW1Steps);
      off.push_back(plain);
      on.push_back(sealed);
      slower.push_back(100.0 * (plain - sealed) / plain);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "durable_encryption_bench: %s\n", e.what());
    return 1;
  }
  const double cost = median(slower);
  char cost_text[64];
  std::snprintf(cost_text, sizeof cost_text, "%.1f%% slower: %s", cost,
                quick        ? "(quick run)"
                : cost <= 10 ? "met (<= 10%)"
                             : "missed (> 10%)");
  print_table(
      Row{"W1 one at a time, normal", "steps/s", "raw sqlite", "ratio", "encryption"},
      {Row{"encryption off", with_commas(median(off)) + " steps/s",
           with_commas(median(raw)) + " commits/s", fixed(median(off) / median(raw), "x", 2), "-"},
       Row{"encryption on", with_commas(median(on)) + " steps/s",
           with_commas(median(raw)) + " commits/s", fixed(median(on) / median(raw), "x", 2),
           cost_text}});
  return 0;
}
