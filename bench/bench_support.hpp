// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the benchmark programs share: scratch files, medians, the raw SQLite commit rate that
// every figure stands beside, and the table they print.

#include <SQLiteCpp/SQLiteCpp.h>
#include <stdlib.h>
#include <sys/vfs.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <durable/durable.hpp>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace durable::bench {

namespace fs = std::filesystem;
using durable::Durability;
using durable::json;
using Stopwatch = std::chrono::steady_clock;

inline std::string_view name_of(Durability d) { return d == Durability::full ? "full" : "normal"; }
inline std::string_view name_of(durable::Replay r) {
  return r == durable::Replay::on_recovery ? "on_recovery" : "every_step";
}

inline double seconds_since(Stopwatch::time_point start) {
  return std::chrono::duration<double>(Stopwatch::now() - start).count();
}

/// The bytes of an SQLite database with its WAL, as the file system holds them.
inline std::uintmax_t file_bytes(const std::string& db) {
  std::uintmax_t bytes = 0;
  for (const char* suffix : {"", "-wal"}) {
    std::error_code ignored;
    const auto size = fs::file_size(db + suffix, ignored);
    if (!ignored) bytes += size;
  }
  return bytes;
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : (values[half - 1] + values[half]) / 2;
}

// Hands out fresh database paths in one directory and removes each database with its WAL and
// shared-memory files once measured; a directory it created is removed as a whole at the end.
class Scratch {
 public:
  explicit Scratch(std::string dir, std::string_view prefix = "durable-bench") {
    if (dir.empty()) {
      std::string pattern =
          (fs::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
      if (mkdtemp(pattern.data()) == nullptr)
        throw std::runtime_error("mkdtemp failed for " + pattern);
      dir_ = pattern;
      owned_ = true;
    } else {
      dir_ = fs::absolute(dir);
      fs::create_directories(dir_);
    }
  }
  ~Scratch() {
    std::error_code ignored;
    if (owned_) fs::remove_all(dir_, ignored);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  const fs::path& dir() const { return dir_; }

  /// A path no file occupies, for a database of this label.
  std::string fresh(std::string_view label) {
    std::string path =
        (dir_ / ("bench-" + std::string(label) + "-" + std::to_string(++count_) + ".db")).string();
    remove(path);
    return path;
  }
  static void remove(const std::string& db) {
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(db + suffix, ignored);
  }

 private:
  fs::path dir_;
  bool owned_ = false;
  int count_ = 0;
};

inline std::string file_system_of(const fs::path& dir) {
  struct statfs info {};
  if (statfs(dir.c_str(), &info) != 0) return "unknown fs";
  switch (static_cast<unsigned long>(info.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x01021994:
      return "tmpfs";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794C7630:
      return "overlayfs";
    case 0x2FC12FC1:
      return "zfs";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "fs 0x%lx", static_cast<unsigned long>(info.f_type));
      return hex;
    }
  }
}

// Rows per second of single-row INSERT + COMMIT into a fresh WAL file, each row its own IMMEDIATE
// transaction, into a table shaped like durable's journal: a (text, text) primary key without
// rowid and a small JSON value.
inline double raw_insert_rate(Scratch& scratch, Durability durability, int rows) {
  const std::string path = scratch.fresh("raw-" + std::string(name_of(durability)));
  double elapsed = 0;
  {
    SQLite::Database db(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec("PRAGMA journal_mode=WAL");
    db.exec(durability == Durability::full ? "PRAGMA synchronous=FULL"
                                           : "PRAGMA synchronous=NORMAL");
    db.exec(
        "CREATE TABLE steps (run_id TEXT NOT NULL, key TEXT NOT NULL, output TEXT, "
        "PRIMARY KEY (run_id, key)) WITHOUT ROWID");
    SQLite::Statement insert(db, "INSERT INTO steps (run_id, key, output) VALUES (?, ?, ?)");
    const std::string run_id = "0192f3a4b5c6d7e8f90a1b2c3d4e5f60";  // ~30 bytes, like a run id
    const auto start = Stopwatch::now();
    for (int i = 0; i < rows; ++i) {
      SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
      insert.bind(1, run_id);
      insert.bind(2, "s#" + std::to_string(i + 1));
      insert.bind(3, json{{"i", i}, {"ok", true}}.dump());
      insert.exec();
      insert.reset();
      tx.commit();
    }
    elapsed = seconds_since(start);
  }
  Scratch::remove(path);
  return rows / elapsed;
}

struct Row {
  std::string scenario, durable, raw, ratio, target;
};

inline std::string with_commas(double value) {
  const bool negative = value < 0;
  const std::string digits = std::to_string(static_cast<long long>(std::abs(value) + 0.5));
  std::string text = negative ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return text;
}

inline void print_table(const Row& head, const std::vector<Row>& rows) {
  std::size_t w[5] = {};
  auto widen = [&](const Row& r) {
    const std::string* cells[5] = {&r.scenario, &r.durable, &r.raw, &r.ratio, &r.target};
    for (int i = 0; i < 5; ++i) w[i] = std::max(w[i], cells[i]->size());
  };
  widen(head);
  for (const Row& r : rows) widen(r);
  auto print = [&](const Row& r) {
    std::printf("%-*s  %*s  %*s  %*s  %s\n", static_cast<int>(w[0]), r.scenario.c_str(),
                static_cast<int>(w[1]), r.durable.c_str(), static_cast<int>(w[2]), r.raw.c_str(),
                static_cast<int>(w[3]), r.ratio.c_str(), r.target.c_str());
  };
  print(head);
  std::printf("%s\n", std::string(w[0] + w[1] + w[2] + w[3] + w[4] + 8, '-').c_str());
  for (const Row& r : rows) print(r);
}

// "12.3 ms": a value with its unit, to `decimals` places.
inline std::string fixed(double value, const char* unit, int decimals = 1) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f %s", decimals, value, unit);
  return text;
}

// A workflow of input {"steps": n} that runs n trivial steps under one repeated id (s, s#2, ...).
inline durable::Workflow loop_workflow() {
  return durable::Workflow("loop", [](durable::Step& step, const json& input) -> json {
    const int steps = input.at("steps").get<int>();
    long sum = 0;
    for (int i = 0; i < steps; ++i) sum += step.run("s", [i] { return i; });
    return sum;
  });
}

// Issue 13's workloads W1 and W3 as workloads_bench.cpp runs them, for the programs that run them
// elsewhere too (on a big history, in history_bench.cpp): W1 is kW1Runs runs of kW1Steps trivial
// steps (loop_workflow), W3 kW3Runs runs of kParallel parallel steps and one more
// (fanout_workflow); "all at once" means started by kStartingClients threads at once
// (start_at_once), then run. A namespace of their own: other programs have their own fan-outs.
namespace workloads {

constexpr int kW1Runs = 200, kW1Steps = 10, kW3Runs = 100;
constexpr int kParallel = 10;  // W3: steps started at once, before the one after them

// W3's workflow: kParallel steps started at once (step.start), awaited with durable::all, then
// one more.
inline durable::Workflow fanout_workflow() {
  return durable::Workflow("fanout", [](durable::Step& step, const json&) -> json {
    auto futures = [&]<std::size_t... I>(std::index_sequence<I...>) {
      // A braced list evaluates in order: the keys are p, p#2, ... as the calls come.
      return std::array{step.start("p", [] { return static_cast<int>(I); })...};
    }
    (std::make_index_sequence<kParallel>{});
    const auto values = std::apply([](auto&... f) { return durable::all(f...); }, futures);
    const int sum = std::apply([](auto... v) { return (v + ...); }, values);
    return step.run("after", [sum] { return sum; });
  });
}

// Clients that start the runs of an "all at once" workload, each on its own thread.
constexpr int kStartingClients = 16;

// Starts `runs` runs of `workflow` from kStartingClients threads at once; returns once all are
// started. A start that throws fails the benchmark.
inline void start_at_once(durable::Runtime& runtime, int runs, const std::string& workflow,
                          const json& input) {
  std::vector<std::thread> clients;
  std::vector<std::exception_ptr> errors(kStartingClients);
  for (int c = 0; c < kStartingClients; ++c) {
    clients.emplace_back([&, c] {
      try {
        for (int i = c; i < runs; i += kStartingClients) runtime.start(workflow, input);
      } catch (...) {
        errors[static_cast<std::size_t>(c)] = std::current_exception();
      }
    });
  }
  for (std::thread& client : clients) client.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace workloads

inline std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%SZ", &utc);
  return text;
}

}  // namespace durable::bench
