// SPDX-License-Identifier: Apache-2.0
#pragma once
// The big histories of durable_history_bench (issue 22): SQLite files of N ended runs, made from a
// few hundred real runs that a durable::Runtime executed, cloned in SQL to N, and cached in a
// directory so that a second run of the benchmark with the same N reuses them.
//
// The clones are rows of exactly the shape durable writes, because they are copies of rows durable
// wrote: the generator knows no column but the ids, run ids and times it substitutes, and reads
// every table's columns from PRAGMA table_info when it runs, so that it keeps working while the
// schema changes. Its INSERTs go through the file's triggers like any other, so that tables kept
// by triggers (counts, say) stay right; it never writes such a table itself.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace durable::bench::history {

// The seed runs: kWorkflows workflows of three steps, 2% of the runs failed at their third step,
// over kCorrelations correlation ids; a tenth of them tagged.
inline constexpr int kWorkflows = 5;
inline constexpr int kCorrelations = 40;
inline constexpr int kFailEvery = 50;  // seed run i fails when i % kFailEvery == kFailEvery - 1
/// The workflow names of the seed runs, kWorkflows of them.
const std::vector<std::string>& workflow_names();

struct GenerateOptions {
  std::filesystem::path dir;  ///< the cache: made if missing; its files are kept
  int seed_runs = 500;        ///< real runs, before cloning (fewer if N is smaller)
  bool verbose = true;        ///< progress lines on stderr
};

struct HistoryFile {
  std::string path;
  std::int64_t runs = 0;
  bool cached = false;         ///< made by an earlier run of the benchmark, with this schema
  double generation_s = 0;     ///< the seconds its generation took (then, if cached)
  std::string generated_at;    ///< when, UTC
  std::string cloned_tables;   ///< "runs, steps, history, run_tags"
  std::string trigger_tables;  ///< the tables with a run_id written by triggers, left to them
  std::vector<std::pair<std::string, std::int64_t>> rows;  ///< rows per table cloned
};

/// A fingerprint of the schema this build of durable creates (every CREATE in sqlite_master of a
/// fresh file), with the generator's own version and the seed count: the cache key beside N.
std::string schema_fingerprint(const GenerateOptions& options);

/// The file of `runs` ended runs in options.dir: the cached one when there is one for this schema,
/// else a new one (made under a temporary name, renamed when complete). Throws std::runtime_error
/// when a step of the generation fails or its counts come out wrong.
HistoryFile history_file(std::int64_t runs, const GenerateOptions& options);

/// Cached histories in options.dir made for another schema (or generator), which no run will use
/// again: the benchmark names them so that they can be removed.
std::vector<std::filesystem::path> stale_files(const GenerateOptions& options);

}  // namespace durable::bench::history
