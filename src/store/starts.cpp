// SPDX-License-Identifier: Apache-2.0
// What a workflow's rules make of a new run, read from the file so that every process that
// creates runs applies them, whether it has the workflow's code or not: a run of a paused
// workflow is created paused (control.cpp); one of a workflow with flow control gets its keys
// (flow.cpp); a start of a debounced workflow waits, or is folded into the run of its key that
// waits already.

#include "durations.hpp"
#include "store/flow.hpp"
#include "store/parts.hpp"

namespace durable::detail {

RunLifecycle::Admitted RunLifecycle::admit_run(const NewRun& run) {
  Admitted admitted;
  json flow;
  {
    sql::Query query(t_.db(),
                     "SELECT (SELECT 1 FROM paused_workflows WHERE name = ?1), "
                     "(SELECT flow FROM workflows WHERE name = ?1)");
    query.bind(1, run.workflow);
    query.next();
    admitted.paused = !query.is_null(0);
    if (!query.is_null(1)) flow = json::parse(query.text(1), nullptr, false);
  }
  if (!flow.is_object()) return admitted;
  const json input = json::parse(run.input, nullptr, false);
  const auto key = [&](const char* name) -> std::optional<std::string> {
    const auto it = flow.find(name);
    if (it == flow.end() || !it->is_string()) return std::nullopt;
    return key_at(input, it->get<std::string>());
  };
  admitted.flow_key = key("concurrency_key");
  admitted.rate_key = key("rate_key");
  // The workflow's deadline counts from the run's creation; an earlier one of its start wins.
  if (const std::int64_t limit = flow.value("deadline_ms", std::int64_t{0}); limit > 0) {
    const std::int64_t own = run.now_ms + limit;
    admitted.deadline_ms = run.deadline_ms > 0 ? std::min(run.deadline_ms, own) : own;
  }
  const std::int64_t debounce_ms = flow.value("debounce_ms", std::int64_t{0});
  if (!run.debounce || debounce_ms <= 0) return admitted;
  admitted.debounce_key = key("debounce_key").value_or("");
  admitted.due_ms = run.now_ms + debounce_ms;
  // One start of a key at a time, where writers run side by side.
  t_.lock("debounce:" + run.workflow + '\n' + *admitted.debounce_key);
  sql::Query waiting(t_.db(),
                     "SELECT id FROM runs WHERE workflow = ? AND debounce_key = ? AND "
                     "status = 'pending' AND began_at IS NULL LIMIT 1" +
                         std::string(t_.db().dialect().lock_row));
  waiting.bind(1, run.workflow);
  waiting.bind(2, *admitted.debounce_key);
  if (!waiting.next()) return admitted;
  const std::string id = waiting.text(0);
  const std::int64_t due = std::max(run.due_ms, admitted.due_ms);
  sql::Query replace(t_.db(),
                     "UPDATE runs SET input = ?, due_at = ?, updated_at = ?, flow_key = ?, "
                     "rate_key = ? WHERE id = ?");
  replace.bind(1, t_.encoded({id, "", "input"}, run.input));
  replace.bind(2, due);
  replace.bind(3, run.now_ms);
  replace.bind_text_or_null(4, admitted.flow_key.value_or(""));
  replace.bind_text_or_null(5, admitted.rate_key.value_or(""));
  replace.bind(6, id);
  replace.run();
  add_history(id, run.now_ms, Status::pending,
              "debounced: a newer start replaced its input; due at " + utc_text(due));
  admitted.debounced_into = id;
  return admitted;
}

std::vector<std::string> RunLifecycle::read_paused_workflows() {
  std::vector<std::string> names;
  sql::Query query(t_.db(), "SELECT name FROM paused_workflows ORDER BY name");
  while (query.next()) names.push_back(query.text(0));
  return names;
}

}  // namespace durable::detail
