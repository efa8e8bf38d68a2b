// SPDX-License-Identifier: Apache-2.0
// Golden-journal replay: today's code of a workflow against a run recorded in a database file.
// One invocation of the engine over the recorded journal, with a host that runs no body and
// writes nothing; then the checks that tell whether the code still makes the calls it made.

#include <durable/testing.hpp>
#include <limits>

#include "durations.hpp"
#include "errors_internal.hpp"
#include "serialization.hpp"
#include "store.hpp"

namespace durable::testing {

namespace {

// Runs no step body and writes nothing. A body left unrun is, to the engine, a step not done
// yet: the invocation ends there, at the first call the journal does not hold.
class ReplayHost final : public detail::Host {
 public:
  void run_bodies(std::vector<std::function<void()>>& /*bodies*/) override {}
  bool write_nested(const detail::EntryWrite& /*write*/) override { return false; }
  bool journal_now(std::vector<detail::EntryWrite>& /*entries*/) override { return false; }
  std::int64_t park_until(std::int64_t /*wake_ms*/) override { return now_ms(); }
  std::int64_t now_ms() override { return detail::to_ms(Clock::now()); }
  std::int64_t event_horizon() override { return 0; }
  void check_child(std::string_view /*workflow*/, const json& /*input*/) override {}
};

// "returned 42" / "failed (Type: message)": how a run or an invocation ended.
std::string ending(bool completed, const json& output, const std::optional<ErrorInfo>& error) {
  return completed ? "returned " + detail::shortened_dump(output)
                   : "failed (" + detail::error_text(error) + ")";
}

// "step.run('charge#2') (at orders.cpp:41)"
std::string call_text(const detail::Invocation::NewCall& call) {
  return call.tool + "('" + call.key + "')" + (call.site.empty() ? "" : " (at " + call.site + ")");
}

class Replay {
 public:
  Replay(const Workflow& wf, detail::Store& store, const std::string& database,
         const std::string& run_id)
      : wf_(&wf), database_(&database) {
    std::optional<RunInfo> info = store.get_run(run_id, false);
    if (!info) {
      throw Error("database '" + detail::shown_database(database) + "' holds no run '" + run_id +
                  "'");
    }
    if (info->workflow != wf.name()) {
      throw Error("run " + run_id + " in database '" + detail::shown_database(database) +
                  "' is a run of workflow '" + info->workflow + "', not of '" + wf.name() + "'");
    }
    recorded_ = std::move(*info);
    run_.id = recorded_.id;
    run_.workflow = recorded_.workflow;
    run_.correlation_id = recorded_.correlation_id;
    run_.input = recorded_.input;
    run_.invocations = recorded_.invocations;
    for (detail::JournalEntry& entry :
         store.journal(run_id).value_or(std::vector<detail::JournalEntry>{})) {
      run_.journal.append(std::move(entry));
    }
    run_.next_seq = run_.journal.size();
    config_.replay_only = true;
    config_.max_output_bytes = std::numeric_limits<std::size_t>::max();
  }

  void check() {
    ReplayHost host;
    std::mt19937_64 random(0);
    detail::Invocation invocation(run_, *wf_, config_, host.now_ms(), random, host);
    const detail::Outcome outcome = invocation.execute();
    using Kind = detail::Outcome::Kind;
    const bool returned = outcome.kind == Kind::completed;
    const bool threw = outcome.kind == Kind::failed;

    // A call that found the journal holding another kind of step under its id.
    if (invocation.diverged()) diverged(outcome.error.value_or(ErrorInfo{}).message);
    const std::optional<detail::Invocation::NewCall>& next = invocation.first_new();
    if (const detail::JournalEntry* missed = invocation.cursor().first_unmet()) {
      const std::string held = "step '" + missed->key + "', " + detail::describe(*missed);
      if (next && next->retrying == nullptr) {
        diverged("the code now calls " + call_text(*next) +
                 ", which the journal does not hold, where the journal holds " + held);
      }
      if (returned || threw) {
        diverged("the workflow now " + ending(returned, outcome.output, outcome.error) +
                 " without calling " + held);
      }
      diverged("the workflow now stops (" + outcome.reason + ") before " + held);
    }

    // Every journaled step was met. A run still in progress (or cancelled) may go on past its
    // journal; one that ended must end the same way, having called nothing more.
    const bool completed = recorded_.status == Status::completed;
    if (!completed && recorded_.status != Status::failed) return;
    const std::string was =
        "the recorded run " + ending(completed, recorded_.output, recorded_.error);
    if (next) {
      diverged(was + ", but the code now goes on to call " + call_text(*next) +
               ", which the recorded run never called");
    }
    if (!returned && !threw) diverged(was + ", but the code now stops: " + outcome.reason);
    if (completed && returned && outcome.output == recorded_.output) return;
    if (!completed && threw && outcome.error && recorded_.error &&
        outcome.error->type == recorded_.error->type &&
        outcome.error->message == recorded_.error->message) {
      return;
    }
    diverged(was + ", but the code now " + ending(returned, outcome.output, outcome.error));
  }

 private:
  [[noreturn]] void diverged(const std::string& what) const {
    throw NonDeterminism("replay of run " + run_.id + " (workflow '" + run_.workflow + "') from '" +
                         detail::shown_database(*database_) + "': " + what);
  }

  const Workflow* wf_;
  const std::string* database_;
  RunInfo recorded_;
  detail::RunState run_;
  detail::EngineConfig config_;
};

}  // namespace

void replay(const Workflow& wf, const std::string& database, std::string_view run_id) {
  const std::unique_ptr<detail::Store> store = detail::open_store_read_only(database);
  Replay(wf, *store, database, std::string(run_id)).check();
}

std::size_t replay_all(const Workflow& wf, const std::string& database) {
  const std::unique_ptr<detail::Store> store = detail::open_store_read_only(database);
  RunFilter filter;
  filter.workflow = wf.name();
  filter.limit = std::numeric_limits<std::size_t>::max();
  const std::vector<RunInfo> runs = store->list_runs(filter);
  if (runs.empty()) {
    throw Error("database '" + detail::shown_database(database) + "' holds no run of workflow '" +
                wf.name() + "'");
  }
  for (auto run = runs.rbegin(); run != runs.rend(); ++run) {  // oldest first
    Replay(wf, *store, database, run->id).check();
  }
  return runs.size();
}

}  // namespace durable::testing
