// SPDX-License-Identifier: Apache-2.0
// GET /metrics and `durable metrics`: the Prometheus text exposition of a database
// (docs/metrics.md).
//
// Every figure but the workers' counters is read from the database at the scrape, so that each
// endpoint on a file reports the same. So none of those is a counter: a retry() resets its run's
// failed steps, and a deleted run takes its journal with it, so each can go down (Prometheus'
// rate() would read that as a reset). They are gauges, named without _total. The histogram,
// whose buckets Prometheus reads as counters, is the exception the text format forces: it has no
// gauge histogram. Its buckets drop only when a retried step's new attempt lands in another
// bucket, a run is deleted, or a workflow or step moves between its own label and `_other`.
//
// The figures of runs and steps are labelled by workflow (and the durations by step too), each
// read in one grouped query. Label values are capped (metrics.hpp): what does not fit is summed
// into `_other`, so a sum over a family is the database's total whatever was folded.
//
// The workers' counters are real counters: each live worker's heartbeat writes its in-memory
// Counters into its row, and a worker id is new for every Runtime, so a series only goes up for
// as long as it exists, and ends with its process (two leases after its last heartbeat).

#include "metrics.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "admin_pool.hpp"
#include "worker_counters.hpp"

namespace durable::ops {

namespace {

using Labels = std::vector<std::pair<const char*, std::string>>;

// A sample's value: an integer as it is, a double in the shortest text that reads back the same.
template <class V>
std::string number(V value) {
  if constexpr (std::is_floating_point_v<V>) {
    char text[32];
    return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
  } else {
    return std::to_string(value);
  }
}

// The text of a scrape, family by family.
class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    text_.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
    text_.append(name).append(" ").append(type).append("\n");
  }
  template <class V>
  void sample(std::string_view name, const Labels& labels, V value) {
    text_.append(name);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      text_.append(i == 0 ? "{" : ",").append(labels[i].first).append("=\"");
      text_.append(escape_label_value(labels[i].second)).append("\"");
    }
    text_.append(labels.empty() ? " " : "} ").append(number(value)).append("\n");
  }
  void gauge(std::string_view name, std::string_view help, auto value) {
    family(name, "gauge", help);
    sample(name, {}, value);
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

// The values of a label kept as they are: all of them when they fit in `cap`, else the cap - 1
// of greatest weight (ties by name); the others are summed into kOtherLabel.
std::set<std::string> kept_values(const std::map<std::string, std::int64_t>& weights,
                                  std::size_t cap) {
  std::vector<std::pair<std::string, std::int64_t>> named;
  bool other = false;
  for (const auto& [value, weight] : weights) {
    if (value == kOtherLabel) {
      other = true;
    } else {
      named.emplace_back(value, weight);
    }
  }
  if (named.size() + (other ? 1 : 0) > cap) {
    // Stable: the map gave them by name, which breaks the ties.
    std::stable_sort(named.begin(), named.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    named.resize(cap - 1);
  }
  std::set<std::string> kept;
  for (auto& [value, weight] : named) kept.insert(std::move(value));
  return kept;
}

std::string label_in(const std::set<std::string>& kept, const std::string& value) {
  return kept.contains(value) ? value : std::string(kOtherLabel);
}

// The database's runs and steps by workflow label (and step label), folded to the caps.
struct ByWorkflow {
  std::map<std::string, std::map<std::string, std::int64_t>> runs;  // workflow → status → runs
  std::map<std::string, detail::StepTotals> steps;                  // workflow → totals
  std::map<std::string, std::map<std::string, detail::StepTotals>> durations;  // → step →
  std::vector<std::int64_t> bounds_ms;  // of the duration buckets, ascending
};

ByWorkflow read_by_workflow(detail::OpsQueries& queries) {
  const std::vector<detail::RunCount> counts = queries.runs_by_workflow();
  // Weighed by runs; a workflow some worker registered is shown with none yet.
  std::map<std::string, std::int64_t> runs_of;
  for (const std::string& name : queries.known_workflows()) runs_of[name] = 0;
  for (const detail::RunCount& c : counts) runs_of[c.workflow] += c.runs;
  const std::set<std::string> workflows = kept_values(runs_of, kMaxWorkflowLabels);

  ByWorkflow by;
  for (const auto& [name, runs] : runs_of) {
    auto& statuses = by.runs[label_in(workflows, name)];
    for (const Status status : kStatuses) statuses[std::string(to_string(status))];
  }
  for (const detail::RunCount& c : counts)
    by.runs[label_in(workflows, c.workflow)][c.status] += c.runs;

  std::map<std::string, std::map<std::string, detail::StepTotals>> steps_of;
  detail::StepGroups groups = queries.steps_by_workflow();
  by.bounds_ms = std::move(groups.bounds_ms);
  for (const detail::StepGroup& group : groups.groups) {
    const std::string workflow = label_in(workflows, group.workflow);
    detail::add_totals(by.steps[workflow], group.totals);
    detail::add_totals(steps_of[workflow][step_label(group.step)], group.totals);
  }
  for (const auto& [workflow, steps] : steps_of) {
    std::map<std::string, std::int64_t> entries_of;
    for (const auto& [step, totals] : steps) entries_of[step] = totals.steps;
    const std::set<std::string> kept = kept_values(entries_of, kMaxStepLabels);
    for (const auto& [step, totals] : steps)
      detail::add_totals(by.durations[workflow][label_in(kept, step)], totals);
  }
  return by;
}

void write_runs_and_steps(Exposition& out, const ByWorkflow& by) {
  out.family("durable_runs", "gauge", "Runs in the database by workflow and status.");
  for (const auto& [workflow, statuses] : by.runs) {
    for (const Status status : kStatuses) {
      const std::string name(to_string(status));
      out.sample("durable_runs", {{"workflow", workflow}, {"status", name}}, statuses.at(name));
    }
  }
  // The step figures of each workflow the runs name, 0 where its runs journaled no step.run.
  const auto per_workflow = [&](const char* name, const char* help, auto figure) {
    out.family(name, "gauge", help);
    for (const auto& [workflow, statuses] : by.runs) {
      const auto it = by.steps.find(workflow);
      const detail::StepTotals totals = it == by.steps.end() ? detail::StepTotals{} : it->second;
      out.sample(name, {{"workflow", workflow}}, totals.*figure);
    }
  };
  per_workflow("durable_steps",
               "step.run entries in the journals by workflow (sleeps, waits, invokes and sends not "
               "counted).",
               &detail::StepTotals::steps);
  per_workflow("durable_step_attempts_failed",
               "Failed attempts of step.run entries by workflow, retried or not, as the journals "
               "hold them now (a retry of a run resets its failed steps).",
               &detail::StepTotals::failed_attempts);
  per_workflow("durable_step_retries",
               "Failed attempts of step.run entries by workflow that were tried again, as the "
               "journals hold them now.",
               &detail::StepTotals::retries);
  per_workflow("durable_steps_failed",
               "step.run entries by workflow failed for good (no attempt left), caught by the "
               "workflow or not, as the journals hold them now (a retry of a run resets them).",
               &detail::StepTotals::failed_steps);
}

void write_durations(Exposition& out, const ByWorkflow& by) {
  constexpr const char* kName = "durable_step_duration_seconds";
  out.family(kName, "histogram",
             "Time the last attempt of each step.run entry took, by workflow and step id, as the "
             "journals hold them now.");
  for (const auto& [workflow, steps] : by.durations) {
    for (const auto& [step, totals] : steps) {
      const Labels labels = {{"workflow", workflow}, {"step", step}};
      Labels bucket = labels;
      bucket.emplace_back("le", "");
      for (std::size_t i = 0; i < by.bounds_ms.size(); ++i) {
        bucket.back().second = number(static_cast<double>(by.bounds_ms[i]) / 1000.0);
        out.sample("durable_step_duration_seconds_bucket", bucket, totals.at_or_under.at(i));
      }
      bucket.back().second = "+Inf";
      out.sample("durable_step_duration_seconds_bucket", bucket, totals.duration_count);
      out.sample("durable_step_duration_seconds_sum", labels,
                 static_cast<double>(totals.duration_sum_ms) / 1000.0);
      out.sample("durable_step_duration_seconds_count", labels, totals.duration_count);
    }
  }
}

// Each live worker's start time and counters, as its last heartbeat wrote them; a worker that has
// not beaten yet, or whose row holds what this build cannot read, has no counters.
void write_workers(Exposition& out, const std::vector<detail::LiveWorker>& workers) {
  std::vector<Labels> labels;
  for (const detail::LiveWorker& w : workers) {
    // The host name: the part of the host identity before its boot id (docs/journal-format.md).
    labels.push_back(
        {{"worker", w.id}, {"host", w.host.substr(0, w.host.find(' '))}, {"pid", number(w.pid)}});
  }
  out.gauge("durable_workers",
            "Live runtimes: their heartbeat was seen less than two of their leases ago.",
            static_cast<std::int64_t>(workers.size()));
  out.family("durable_worker_start_time_seconds", "gauge",
             "When each live worker (a Runtime) registered, in seconds since the epoch.");
  for (std::size_t i = 0; i < workers.size(); ++i) {
    out.sample("durable_worker_start_time_seconds", labels[i],
               static_cast<double>(workers[i].started_at_ms) / 1000.0);
  }
  std::vector<nlohmann::json> counters;
  for (const detail::LiveWorker& w : workers) {
    counters.push_back(nlohmann::json::parse(w.counters, nullptr, false));
  }
  for (const detail::CounterField& field : detail::kCounterFields) {
    const std::string name = std::string("durable_worker_") + field.name + "_total";
    out.family(name, "counter", field.help);
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (!counters[i].is_object()) continue;
      const auto it = counters[i].find(field.name);
      if (it != counters[i].end() && it->is_number_unsigned()) {
        out.sample(name, labels[i], it->get<std::uint64_t>());
      }
    }
  }
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '"') {
      escaped += "\\\"";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

std::string step_label(std::string_view base) {
  std::string label;
  label.reserve(base.size());
  for (std::size_t i = 0; i < base.size(); ++i) {
    if (base[i] == '[') {
      i = std::min(base.find(']', i), base.size() - 1);  // to the index's end
    } else if (base[i] == '#') {
      while (i + 1 < base.size() && base[i + 1] >= '0' && base[i + 1] <= '9') ++i;
    } else {
      label += base[i];
    }
  }
  return label;
}

std::string Admin::metrics() {
  const Lease db = lease();
  const std::int64_t now = now_ms();
  Exposition out;
  const ByWorkflow by = read_by_workflow(*db->queries);
  write_runs_and_steps(out, by);
  const detail::Backlog backlog = db->store->backlog(now);
  out.gauge("durable_pending_depth", "Runs due now and not yet claimed.", backlog.depth);
  out.gauge(
      "durable_oldest_pending_age_seconds",
      "How long the oldest due, unclaimed run has waited (0 when none).",
      backlog.oldest_due_ms
          ? static_cast<double>(std::max<std::int64_t>(0, now - *backlog.oldest_due_ms)) / 1000.0
          : 0.0);
  write_workers(out, db->queries->live_worker_rows(now));
  write_durations(out, by);
  return out.take();
}

}  // namespace durable::ops
