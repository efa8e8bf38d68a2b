// SPDX-License-Identifier: Apache-2.0
// Golden-journal replay: today's code of a workflow against a run recorded in a database file
// (the checks themselves are detail::check_replay's, which Runtime::verify shares).

#include <durable/testing.hpp>
#include <limits>

#include "errors_internal.hpp"
#include "replay_check.hpp"
#include "serialization.hpp"
#include "store.hpp"

namespace durable::testing {

namespace {

// The recorded run `run_id` of `wf` in the store, replayed; throws NonDeterminism for a
// divergence (see detail::check_replay).
void check(const Workflow& wf, detail::Store& store, const std::string& database,
           const std::string& run_id) {
  std::optional<RunInfo> info = store.get_run(run_id, false);
  if (!info) {
    throw NotFound("database '" + detail::shown_database(database) + "' holds no run '" + run_id +
                   "'");
  }
  if (info->workflow != wf.name()) {
    throw Error(errc::invalid_argument,
                "run " + run_id + " in database '" + detail::shown_database(database) +
                    "' is a run of workflow '" + info->workflow + "', not of '" + wf.name() + "'");
  }
  const std::optional<Divergence> divergence = detail::check_replay(
      wf, *info, store.journal(run_id).value_or(std::vector<detail::JournalEntry>{}));
  if (!divergence) return;
  throw NonDeterminism("replay of run " + run_id + " (workflow '" + wf.name() + "') from '" +
                       detail::shown_database(database) +
                       "': " + std::string(detail::without_id(divergence->message)));
}

// The database for reading, its payloads decoded as `options` says.
std::unique_ptr<detail::Store> open_recorded(const std::string& database,
                                             const RuntimeOptions& options) {
  auto payloads =
      std::make_shared<const detail::Payloads>(options.codec, options.encryption_key_file);
  return detail::open_store_read_only(database, std::move(payloads));
}

}  // namespace

void replay(const Workflow& wf, const std::string& database, std::string_view run_id) {
  replay(wf, database, run_id, RuntimeOptions{});
}

void replay(const Workflow& wf, const std::string& database, std::string_view run_id,
            const RuntimeOptions& options) {
  const std::unique_ptr<detail::Store> store = open_recorded(database, options);
  check(wf, *store, database, std::string(run_id));
}

std::size_t replay_all(const Workflow& wf, const std::string& database) {
  return replay_all(wf, database, RuntimeOptions{});
}

std::size_t replay_all(const Workflow& wf, const std::string& database,
                       const RuntimeOptions& options) {
  const std::unique_ptr<detail::Store> store = open_recorded(database, options);
  RunFilter filter;
  filter.workflow = wf.name();
  filter.limit = std::numeric_limits<std::size_t>::max();
  const std::vector<RunInfo> runs = store->list_runs(filter);
  if (runs.empty()) {
    throw NotFound("database '" + detail::shown_database(database) +
                   "' holds no run of workflow '" + wf.name() + "'");
  }
  for (auto run = runs.rbegin(); run != runs.rend(); ++run) {  // oldest first
    check(wf, *store, database, run->id);
  }
  return runs.size();
}

}  // namespace durable::testing
