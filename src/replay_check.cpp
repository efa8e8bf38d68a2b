// SPDX-License-Identifier: Apache-2.0
#include "replay_check.hpp"

#include <algorithm>
#include <limits>

#include "durations.hpp"
#include "engine.hpp"
#include "errors_internal.hpp"
#include "serialization.hpp"

namespace durable::detail {

namespace {

// Runs no step body and writes nothing. A body left unrun is, to the engine, a step not done
// yet: the invocation ends there, at the first call the journal does not hold.
class ReplayHost final : public Host {
 public:
  // Nothing is run or written: a body not run and a transaction not written are steps not done
  // yet; a write is refused.
  Resolution carry_out(const Decision& decision) override {
    return std::visit(Handlers{[this](const decide::Park&) {
                                 return Resolution{true, now_ms()};
                               },
                               [](const decide::HandOver&) -> Resolution {
                                 bug("a replay abandoned a step body it never runs");
                               },
                               [](const decide::Linger& linger) {
                                 linger_polling(linger.done, Env::system());
                                 return Resolution{};
                               },
                               [](const auto&) { return Resolution{false}; }},
                      decision);
  }
  std::int64_t now_ms() override { return Env::system().now_ms(); }
  std::int64_t event_horizon() override { return 0; }
  void check_child(std::string_view /*workflow*/, const json& /*input*/) override {}
};

// "returned 42" / "failed (Type: message)": how a run or an invocation ended.
std::string ending(bool completed, const json& output, const std::optional<ErrorInfo>& error) {
  return completed ? "returned " + shortened_dump(output) : "failed (" + error_text(error) + ")";
}

Divergence diverged(const RunInfo& run, std::string step, std::string message, std::string where) {
  return Divergence{run.id, run.workflow, std::move(step), std::move(message), std::move(where)};
}

// The run as an invocation of it sees it, from what was recorded.
RunState state_of(const RunInfo& recorded, std::vector<JournalEntry> journal) {
  RunState run;
  run.id = recorded.id;
  run.workflow = recorded.workflow;
  run.correlation_id = recorded.correlation_id;
  run.input = recorded.input;
  run.tags = recorded.tags;  // as a claim reads them: step.set_tags counts against them
  run.invocations = recorded.invocations;
  for (JournalEntry& entry : journal) run.journal.append(std::move(entry));
  run.next_seq = run.journal.size();
  return run;
}

}  // namespace

std::optional<Divergence> check_replay(const Workflow& wf, const RunInfo& recorded,
                                       std::vector<JournalEntry> journal) {
  RunState run = state_of(recorded, std::move(journal));
  EngineConfig config;
  config.replay_only = true;
  config.strict = true;
  config.max_output_bytes = std::numeric_limits<std::size_t>::max();

  ReplayHost host;
  std::mt19937_64 random(0);
  Invocation invocation(run, wf, config, host.now_ms(), random, host);
  note_call(SourceLocation{});  // call_site(): this replay's last step call, none so far
  const Outcome outcome = invocation.execute();
  const std::string last_call = call_site();
  const bool returned = outcome.kind == Outcome::Kind::completed;
  const bool threw = outcome.kind == Outcome::Kind::failed;

  // A call that found the journal holding another kind of step under its id, or strict
  // replay's divergence: a call the journal does not hold, or the return, before a journaled
  // step was met (the engine's rule, ReplayRules).
  const ReplayRules& rules = invocation.rules();
  if (rules.diverged()) {
    const ErrorInfo error = outcome.error.value_or(ErrorInfo{});
    return diverged(recorded, error.step_id, error.message, rules.diverged_site());
  }
  const std::optional<NewCall>& next = rules.first_new();
  // What the runtime would not stop at, but a replay reports: the workflow failing, or waiting,
  // before a journaled step.
  if (const JournalEntry* missed = invocation.cursor().first_unmet()) {
    const std::string held = "step '" + missed->key + "', " + describe(*missed);
    if (threw) {
      return diverged(recorded, missed->key,
                      "the workflow now " + ending(false, outcome.output, outcome.error) +
                          " without calling " + held,
                      last_call);
    }
    return diverged(recorded, missed->key,
                    "the workflow now stops (" + outcome.reason + ") before " + held, last_call);
  }

  // Every journaled step was met. A run still in progress may go on past its journal, but not
  // fail where nothing journaled failed: the runtime would fail it (an input or a result that
  // no longer converts, a step id taken by a patch). A cancelled run is not replayed again.
  const bool completed = recorded.status == Status::completed;
  if (!completed && recorded.status != Status::failed) {
    const bool in_progress = recorded.status != Status::cancelled;
    const bool step_failed =
        std::any_of(run.journal.entries().begin(), run.journal.entries().end(),
                    [](const JournalEntry& e) { return e.state == StepState::failed; });
    if (!in_progress || !threw || step_failed) return std::nullopt;
    return diverged(recorded, "", "the code now fails (" + error_text(outcome.error) +
                                      ") where the journal holds no failed step", last_call);
  }
  const std::string was = "the recorded run " + ending(completed, recorded.output, recorded.error);
  if (next) {
    return diverged(recorded, next->key,
                      was + ", but the code now goes on to call " + call_text(*next) +
                          ", which the recorded run never called",
                      next->site);
  }
  if (!returned && !threw) {
    return diverged(recorded, "", was + ", but the code now stops: " + outcome.reason, last_call);
  }
  if (completed && returned && outcome.output == recorded.output) return std::nullopt;
  if (!completed && threw && outcome.error && recorded.error &&
      outcome.error->type == recorded.error->type &&
      outcome.error->message == recorded.error->message) {
    return std::nullopt;
  }
  return diverged(recorded, "",
                  was + ", but the code now " + ending(returned, outcome.output, outcome.error),
                  last_call);
}

}  // namespace durable::detail
