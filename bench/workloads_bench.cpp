// SPDX-License-Identifier: Apache-2.0
// durable_workloads_bench: the fixed cost of a run and the cost of a step, as workloads W0-W3
// at both durabilities and in both replay modes, each beside raw SQLite commits measured in the
// same run on the same file system, with the target it is held to and whether it met it.
//
//   durable_workloads_bench [--quick] [--only W] [--durability normal|full] [DIR]
//
// --only (w0, w1-one, w1-all, w2 or w3) and --durability narrow the run, for a profiler.
//
// The workloads (one Runtime on a fresh file each, run_until_idle() driving it, timed from the
// first start() to the last run completed, so a run's start is part of its cost):
// - W0: empty runs one after another (start, then run_until_idle): µs per run, and how many raw
//   single-row commits of the same durability take as long.
// - W1 one at a time: runs of 10 trivial steps, one after another. W1 all at once: the same runs
//   all started by 16 threads at once (as 16 clients would), then run. Steps per second, as a
//   ratio to raw single-row commits per second.
// - W2: one run of 1,000 trivial steps.
// - W3: runs of 10 parallel steps (step.start, then all()) and one more step, all started by 16
//   threads at once, then run.
// Raw: single-row INSERT + COMMIT into a journal-shaped WAL table (bench_support.hpp). Each
// repetition measures raw, then every workload, back to back, so a slow phase of the machine
// hits both alike; a figure is the median over repetitions of durable's value, and its ratio the
// median of the per-repetition ratios. --quick shrinks everything to a smoke run (CTest runs it)
// whose figures are not meant to be quoted.

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <durable/durable.hpp>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.hpp"

namespace {

using namespace durable::bench;
using namespace durable::bench::workloads;
using durable::Replay;

struct Sizes {
  int reps = 5;
  int w0_runs = 200;
  int w1_runs = kW1Runs, w1_steps = kW1Steps;
  int w2_steps = 1000;
  int w3_runs = kW3Runs;
  int raw_rows_normal = 3000, raw_rows_full = 600;
};

Sizes quick_sizes() {
  return Sizes{.reps = 1,
               .w0_runs = 10,
               .w1_runs = 10,
               .w1_steps = 10,
               .w2_steps = 50,
               .w3_runs = 5,
               .raw_rows_normal = 100,
               .raw_rows_full = 20};
}

enum class Workload { w0, w1_one, w1_all, w2, w3 };
constexpr std::array kWorkloads{Workload::w0, Workload::w1_one, Workload::w1_all, Workload::w2,
                                Workload::w3};
constexpr std::array<const char*, 5> kOptionNames{"w0", "w1-one", "w1-all", "w2", "w3"};

std::string title(Workload w, const Sizes& s) {
  const std::string runs = [&] {
    switch (w) {
      case Workload::w0:
        return std::to_string(s.w0_runs) + " empty runs, one after another";
      case Workload::w1_one:
        return std::to_string(s.w1_runs) + " runs x " + std::to_string(s.w1_steps) +
               " steps, one at a time";
      case Workload::w1_all:
        return std::to_string(s.w1_runs) + " runs x " + std::to_string(s.w1_steps) +
               " steps, all at once";
      case Workload::w2:
        return "1 run x " + std::to_string(s.w2_steps) + " steps";
      case Workload::w3:
        return std::to_string(s.w3_runs) + " runs x (" + std::to_string(kParallel) +
               " parallel + 1), all at once";
    }
    return std::string();
  }();
  const char* name = w == Workload::w0                                ? "W0"
                     : w == Workload::w1_one || w == Workload::w1_all ? "W1"
                     : w == Workload::w2                              ? "W2"
                                                                      : "W3";
  return std::string(name) + ": " + runs;
}

// The target for a workload at a durability (issue 13's; issue 42 raised W1 one at a time at full
// to 0.9x): for W0 the most raw commits a run may cost, for the others the least ratio of
// steps/s to raw commits/s. None: 0.
double target(Workload w, Durability d) {
  const bool full = d == Durability::full;
  switch (w) {
    case Workload::w0:
      return full ? 2 : 4;
    case Workload::w1_one:
      return full ? 0.9 : 0.6;
    case Workload::w1_all:
      return full ? 6.2 : 0;
    case Workload::w2:
      return full ? 0.9 : 0;
    case Workload::w3:
      return full ? 7.4 : 0;
  }
  return 0;
}

durable::Workflow empty_workflow() {
  return durable::Workflow("empty", [](durable::Step&, const json&) -> json { return nullptr; });
}

// Runs one workload on a fresh file and returns its seconds, from the first start to the last
// completion; throws if a run did not complete.
double run_workload(Workload w, Durability d, Replay r, const Sizes& s, Scratch& scratch) {
  const std::string path = scratch.fresh("w");
  double elapsed = 0;
  {
    durable::RuntimeOptions options;
    options.database = path;
    options.durability = d;
    options.replay = r;
    options.log_level = durable::LogLevel::off;
    durable::Runtime runtime(options);
    runtime.add(empty_workflow());
    runtime.add(loop_workflow());
    runtime.add(fanout_workflow());
    const json w1_input{{"steps", s.w1_steps}};
    const auto start = Stopwatch::now();
    switch (w) {
      case Workload::w0:
        for (int i = 0; i < s.w0_runs; ++i) {
          runtime.start("empty");
          runtime.run_until_idle();
        }
        break;
      case Workload::w1_one:
        for (int i = 0; i < s.w1_runs; ++i) {
          runtime.start("loop", w1_input);
          runtime.run_until_idle();
        }
        break;
      case Workload::w1_all:
        start_at_once(runtime, s.w1_runs, "loop", w1_input);
        runtime.run_until_idle();
        break;
      case Workload::w2:
        runtime.start("loop", {{"steps", s.w2_steps}});
        runtime.run_until_idle();
        break;
      case Workload::w3:
        start_at_once(runtime, s.w3_runs, "fanout", json::object());
        runtime.run_until_idle();
        break;
    }
    elapsed = seconds_since(start);
    const std::size_t runs =
        runtime.list({.status = durable::Status::completed, .limit = 100'000}).size();
    const std::size_t expected = w == Workload::w0                                ? s.w0_runs
                                 : w == Workload::w1_one || w == Workload::w1_all ? s.w1_runs
                                 : w == Workload::w2                              ? 1
                                                                                  : s.w3_runs;
    if (runs != expected) {
      throw std::runtime_error(title(w, s) + ": " + std::to_string(runs) + " of " +
                               std::to_string(expected) + " runs completed");
    }
  }
  Scratch::remove(path);
  return elapsed;
}

int steps_of(Workload w, const Sizes& s) {
  switch (w) {
    case Workload::w0:
      return 0;
    case Workload::w1_one:
    case Workload::w1_all:
      return s.w1_runs * s.w1_steps;
    case Workload::w2:
      return s.w2_steps;
    case Workload::w3:
      return s.w3_runs * (kParallel + 1);
  }
  return 0;
}

struct Figures {
  std::vector<double> value;  // W0: µs per run; the others: steps/s
  std::vector<double> ratio;  // W0: raw commits per run; the others: x raw commits/s
  std::vector<double> raw;    // raw commits/s of the same repetition
};

std::string met(Workload w, double ratio, double goal, bool quick) {
  if (goal == 0) return "-";
  const bool ok = w == Workload::w0 ? ratio <= goal : ratio >= goal;
  char text[64];
  std::snprintf(text, sizeof text, "%s%.1f%s: %s", w == Workload::w0 ? "<= " : ">= ", goal,
                w == Workload::w0 ? " commits" : "x",
                quick ? "(quick run)"
                : ok  ? "met"
                      : "missed");
  return text;
}


// The command line; nullopt after a usage error was printed.
struct Args {
  bool quick = false;
  std::string dir, only, durability;
  bool wanted(Workload w) const {
    return only.empty() || only == kOptionNames[static_cast<std::size_t>(w)];
  }
  bool wanted(Durability d) const { return durability.empty() || durability == name_of(d); }
};

std::optional<Args> parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--quick") == 0) {
      args.quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && has_value) {
      args.only = argv[++i];
    } else if (std::strcmp(argv[i], "--durability") == 0 && has_value) {
      args.durability = argv[++i];
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr,
                   "usage: durable_workloads_bench [--quick] [--only w0|w1-one|w1-all|w2|w3] "
                   "[--durability normal|full] [DIR]\n");
      return std::nullopt;
    } else {
      args.dir = argv[i];
    }
  }
  if (!args.only.empty() &&
      std::find(kOptionNames.begin(), kOptionNames.end(), args.only) == kOptionNames.end()) {
    std::fprintf(stderr, "durable_workloads_bench: --only takes w0, w1-one, w1-all, w2 or w3\n");
    return std::nullopt;
  }
  if (!args.durability.empty() && args.durability != "normal" && args.durability != "full") {
    std::fprintf(stderr, "durable_workloads_bench: --durability takes normal or full\n");
    return std::nullopt;
  }
  return args;
}

using FiguresOf = std::map<std::pair<int, int>, Figures>;  // (workload, replay) -> figures

// Each repetition: raw commits, then every workload wanted in both replay modes, back to back.
FiguresOf measure(const Args& args, Durability d, const Sizes& sizes, Scratch& scratch) {
  FiguresOf figures;
  for (int rep = 0; rep < sizes.reps; ++rep) {
    const double raw = raw_insert_rate(
        scratch, d, d == Durability::full ? sizes.raw_rows_full : sizes.raw_rows_normal);
    for (const Workload w : kWorkloads) {
      if (!args.wanted(w)) continue;
      for (const Replay r : {Replay::every_step, Replay::on_recovery}) {
        const double seconds = run_workload(w, d, r, sizes, scratch);
        Figures& f = figures[{static_cast<int>(w), static_cast<int>(r)}];
        if (w == Workload::w0) {
          const double per_run = seconds / sizes.w0_runs;
          f.value.push_back(per_run * 1e6);
          f.ratio.push_back(per_run * raw);
        } else {
          const double rate = steps_of(w, sizes) / seconds;
          f.value.push_back(rate);
          f.ratio.push_back(rate / raw);
        }
        f.raw.push_back(raw);
      }
    }
  }
  return figures;
}

// The table's rows of one durability: medians, the ratio, and the target.
void add_rows(const Args& args, Durability d, const Sizes& sizes, const FiguresOf& figures,
              std::vector<Row>& rows) {
  for (const Workload w : kWorkloads) {
    if (!args.wanted(w)) continue;
    for (const Replay r : {Replay::every_step, Replay::on_recovery}) {
      const Figures& f = figures.at({static_cast<int>(w), static_cast<int>(r)});
      const double ratio = median(f.ratio);
      char ratio_text[48];
      std::snprintf(ratio_text, sizeof ratio_text,
                    w == Workload::w0 ? "%.1f commits/run" : "%.2fx", ratio);
      rows.push_back(
          Row{title(w, sizes) + ", " + std::string(name_of(d)) + ", " + std::string(name_of(r)),
              w == Workload::w0 ? with_commas(median(f.value)) + " us/run"
                                : with_commas(median(f.value)) + " steps/s",
              with_commas(median(f.raw)) + " commits/s", ratio_text,
              met(w, ratio, target(w, d), args.quick)});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Args> args = parse_args(argc, argv);
  if (!args) return 2;
  const Sizes sizes = args->quick ? quick_sizes() : Sizes{};
  Scratch scratch(args->dir, "durable-workloads");
  std::printf("durable_workloads_bench %s, %s, in %s (%s); median of %d repetition(s)\n",
              std::string(durable::version()).c_str(), utc_now().c_str(), scratch.dir().c_str(),
              file_system_of(scratch.dir()).c_str(), sizes.reps);
  std::vector<Row> rows;
  try {
    for (const Durability d : {Durability::normal, Durability::full}) {
      if (args->wanted(d)) add_rows(*args, d, sizes, measure(*args, d, sizes, scratch), rows);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "durable_workloads_bench: %s\n", e.what());
    return 1;
  }
  print_table(Row{"workload, durability, replay", "durable", "raw sqlite", "ratio", "target"},
              rows);
  return 0;
}
