// SPDX-License-Identifier: Apache-2.0
#include "store/flow.hpp"

#include <algorithm>

namespace durable::detail {

std::string FlowRule::stored() const {
  json flow = json::object();
  if (concurrency > 0 && !concurrency_key.empty()) flow["concurrency_key"] = concurrency_key;
  if (rate_limit > 0) flow["rate_key"] = rate_key;
  if (debounce_ms > 0) {
    flow["debounce_ms"] = debounce_ms;
    flow["debounce_key"] = debounce_key;
  }
  if (deadline_ms > 0) flow["deadline_ms"] = deadline_ms;
  return flow.empty() ? std::string() : flow.dump();
}

std::string key_at(const json& input, const std::string& pointer) {
  if (pointer.empty()) return "";
  try {
    const json::json_pointer at(pointer);
    if (!input.contains(at)) return "";
    const json& value = input.at(at);
    return value.is_string() ? value.get<std::string>()
                             : value.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const json::exception&) {
    return "";  // a pointer through a value of another type: nothing there
  }
}

std::string key_at(const std::string& input_text, const std::string& pointer) {
  if (pointer.empty()) return "";
  const json input = json::parse(input_text, nullptr, false);
  return input.is_discarded() ? "" : key_at(input, pointer);
}

FlowGate::FlowGate(sql::Connection& db, const ClaimRequest& request,
                   const std::function<void(const std::string&)>& lock)
    : db_(&db), request_(&request) {
  for (const auto& [workflow, rule] : request.flows) {
    if (rule.concurrency <= 0) continue;
    // Claimers that run side by side count one at a time, so that together they stay within.
    lock("limit:" + workflow);
    if (rule.concurrency_key.empty()) {
      sql::Query count(db, "SELECT count(*) FROM runs WHERE workflow = ? AND status = 'running'");
      count.bind(1, workflow);
      count.next();
      room_[workflow] = rule.concurrency - count.int32(0);
      continue;
    }
    sql::Query count(db,
                     "SELECT coalesce(flow_key, ''), count(*) FROM runs WHERE workflow = ? AND "
                     "status = 'running' GROUP BY coalesce(flow_key, '')");
    count.bind(1, workflow);
    auto& running = running_[workflow];
    while (count.next()) {
      running[count.text(0)] = count.int32(1);
      if (count.int32(1) >= rule.concurrency) full_[workflow].insert(count.text(0));
    }
  }
  for (const auto& [workflow, rule] : request.flows) {
    if (rule.rate_limit > 0) lock("rate:" + workflow);
  }
}

std::vector<std::string> FlowGate::open(const std::vector<std::string>& workflows) const {
  std::vector<std::string> out;
  for (const std::string& name : workflows) {
    const auto it = room_.find(name);
    if (it == room_.end() || it->second > 0) out.push_back(name);
  }
  return out;
}

std::string FlowGate::exclusion() const {
  std::string sql;
  for (const auto& [workflow, keys] : full_) {
    if (keys.empty()) continue;
    // A run whose key is not stored yet is not left out: check() computes it.
    sql += " AND NOT (workflow = ? AND flow_key IS NOT NULL AND flow_key IN (" +
           sql::placeholders(keys.size()) + "))";
  }
  return sql;
}

int FlowGate::bind_exclusion(sql::Query& query, int index) const {
  for (const auto& [workflow, keys] : full_) {
    if (keys.empty()) continue;
    query.bind(index++, workflow);
    for (const std::string& key : keys) query.bind(index++, key);
  }
  return index;
}

std::string FlowGate::flow_key(const GatedRun& run, const FlowRule& rule) const {
  return run.flow_key ? *run.flow_key : key_at(*run.input, rule.concurrency_key);
}

std::string FlowGate::rate_key(const GatedRun& run, const FlowRule& rule) const {
  return run.rate_key ? *run.rate_key : key_at(*run.input, rule.rate_key);
}

FlowGate::Window& FlowGate::window(const std::string& workflow, const std::string& key,
                                   const FlowRule& rule) {
  const auto [it, fresh] = windows_.try_emplace({workflow, key});
  if (fresh) {
    sql::Query began(*db_,
                     "SELECT first_body_at FROM runs WHERE workflow = ? AND rate_key = ? AND "
                     "first_body_at > ? ORDER BY first_body_at");
    began.bind(1, workflow);
    began.bind(2, key);
    // A millisecond more than the period: a begin is known to the millisecond below it. (The
    // body's own first reading of the clock comes later still, by however long its thread takes
    // to enter it: docs/flow-control.md.)
    began.bind(3, request_->now_ms - rule.rate_period_ms - 1);
    while (began.next()) it->second.began.push_back(began.int64(0));
    sql::Query reserved(*db_,
                        "SELECT count(*) FROM runs WHERE workflow = ? AND rate_key = ? AND "
                        "first_body_at IS NULL AND status = 'running'");
    reserved.bind(1, workflow);
    reserved.bind(2, key);
    if (reserved.next()) it->second.reserved = reserved.int32(0);
  }
  return it->second;
}

FlowGate::Verdict FlowGate::check(const GatedRun& run) {
  const auto found = request_->flows.find(run.workflow);
  if (found == request_->flows.end()) return Verdict::admit;
  const FlowRule& rule = found->second;
  if (rule.concurrency > 0) {
    if (rule.concurrency_key.empty()) {
      if (room_[run.workflow] <= 0) return Verdict::held;
    } else {
      const std::string key = flow_key(run, rule);
      if (running_[run.workflow][key] >= rule.concurrency) {
        full_[run.workflow].insert(key);
        return Verdict::held;
      }
    }
  }
  if (rule.rate_limit > 0 && !run.body_began) {
    Window& w = window(run.workflow, rate_key(run, rule), rule);
    const int n = w.held();
    if (n >= rule.rate_limit) {
      // The j-th run held back by this claim waits for the j-th slot the window frees: the
      // oldest begin's, one period on, then the next one's, and around again a period later. A
      // slot reserved by a run yet to begin frees a period after now at the earliest.
      const int j = w.deferred++;
      const auto k = static_cast<std::size_t>(j % n);
      const std::int64_t held_since = k < w.began.size() ? w.began[k] : request_->now_ms;
      const std::int64_t slot = held_since + rule.rate_period_ms * (1 + j / n) + 1;
      sql::Query defer(*db_, "UPDATE runs SET due_at = ? WHERE id = ?");
      defer.bind(1, std::max(slot, request_->now_ms + 1));
      defer.bind(2, run.id);
      defer.run();
      return Verdict::deferred;
    }
  }
  return Verdict::admit;
}

FlowGate::Stamp FlowGate::took(const GatedRun& run) {
  Stamp stamp;
  const auto found = request_->flows.find(run.workflow);
  if (found == request_->flows.end()) return stamp;
  const FlowRule& rule = found->second;
  if (rule.concurrency > 0) {
    if (rule.concurrency_key.empty()) {
      --room_[run.workflow];
    } else {
      stamp.flow_key = flow_key(run, rule);
      if (++running_[run.workflow][*stamp.flow_key] >= rule.concurrency) {
        full_[run.workflow].insert(*stamp.flow_key);
      }
    }
  }
  if (rule.rate_limit > 0) {
    stamp.rate_key = rate_key(run, rule);
    if (!run.body_began) ++window(run.workflow, *stamp.rate_key, rule).reserved;
  }
  return stamp;
}

}  // namespace durable::detail
