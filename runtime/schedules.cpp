// SPDX-License-Identifier: Apache-2.0
#include "schedules.hpp"

#include "cron.hpp"
#include "durations.hpp"
#include "errors_internal.hpp"
#include "serialization.hpp"

namespace durable::detail {

namespace {

// The next due time of a schedule after `now`: the first slot of its grid (interval) or the
// first cron match after now. The slots it missed while no runtime was up are skipped: the run
// just started stands for all of them.
std::optional<std::int64_t> next_slot(const ScheduleRow& row, std::int64_t now) {
  if (!row.cron.empty()) return Cron::parse(row.cron).next_after(now);
  const std::int64_t missed = now < row.next_at ? 0 : (now - row.next_at) / row.every_ms + 1;
  return row.next_at + missed * row.every_ms;
}

}  // namespace

std::string Schedules::schedule(std::string_view workflow, const json& input,
                                const Schedule& when) {
  const std::shared_ptr<const Workflow> wf = c_.workflow(workflow);
  const std::string label = "schedule of '" + std::string(workflow) + "'";
  const bool interval = when.every.count() != 0;
  if (interval == !when.cron.empty()) {
    throw Error(errc::invalid_argument,
                label + ": give either Schedule::every or Schedule::cron, not " +
                    (interval ? "both" : "neither"));
  }
  if (interval && when.every.count() < 0)
    throw Error(errc::invalid_argument, label + ": every must be positive");
  if (when.count && *when.count < 1) {
    throw Error(
        errc::invalid_argument,
        label + ": count must be 1 or more (or none: no end), not " + std::to_string(*when.count));
  }
  std::optional<Cron> cron;
  if (!interval) cron = Cron::parse(when.cron);  // throws Error naming what is wrong
  ScheduleRow row;
  // Stored form first: it refuses a value nested too deep before anything copies it.
  row.input = storable_text(input, label + ": the input", c_.max_output_bytes);
  wf->check_input(input);
  const std::int64_t now = c_.env->now_ms();
  check_utf8(when.id, label + ": the schedule id");
  row.id = when.id.empty() ? c_.env->new_id() : when.id;
  row.workflow = std::string(workflow);
  row.every_ms = when.every.count();
  row.cron = when.cron;
  row.remaining = when.count;
  if (when.first) {
    row.next_at = to_ms(*when.first);
  } else if (cron) {
    const auto first = cron->next_after(now);
    if (!first)
      throw Error(errc::invalid_argument,
                  label + ": the cron expression '" + when.cron + "' never matches");
    row.next_at = *first;
  } else {
    row.next_at = now + row.every_ms;
  }
  // A schedule() repeated with the same id and spec (at every start of a program, say) keeps the
  // stored schedule going: its next time and count are not reset.
  json spec = {{"workflow", row.workflow},
               {"input", input},
               {"every", row.every_ms},
               {"cron", row.cron},
               {"count", when.count ? json(*when.count) : json()},
               {"first", when.first ? json(to_ms(*when.first)) : json()}};
  row.spec = spec.dump();
  const bool written = c_.writer.alone([&](ScheduleStore& store) {
    forget_next_fire();  // under the store's lock, as the writer holds it
    return store.put_schedule(row, now);
  });
  if (written) {
    c_.logger.write(LogLevel::info, "schedule.stored", "schedule stored",
                    {{"schedule", row.id}, {"workflow", row.workflow}}, now);
    c_.wake();
  }
  return row.id;
}

std::vector<ScheduleInfo> Schedules::list() {
  std::vector<ScheduleInfo> all;
  c_.read([&](ScheduleStore& store) { all = store.list_schedules(); });
  return all;
}

void Schedules::unschedule(std::string_view id) {
  const bool removed = c_.writer.alone([&](ScheduleStore& store) {
    forget_next_fire();  // under the store's lock, as the writer holds it
    return store.remove_schedule(std::string(id));
  });
  if (!removed) throw NotFound("no schedule with id '" + std::string(id) + "'");
}

std::optional<std::int64_t> Schedules::next_fire(ScheduleStore& store) {
  return next_fire_.get(*c_.env, c_.poll_interval, [&] { return store.next_schedule_at(); });
}

std::size_t Schedules::fire() {
  const std::int64_t now = c_.env->now_ms();
  std::optional<std::int64_t> next;
  c_.read([&](ScheduleStore& store) { next = next_fire(store); });
  if (!next || *next > now) return 0;  // a write only when one is due
  const std::vector<std::string> started = c_.writer.alone([&](ScheduleStore& store) {
    std::vector<std::string> fired = store.fire_schedules(now, next_slot);
    forget_next_fire();  // under the store's lock, as the writer holds it
    return fired;
  });
  c_.started(started.size());
  for (const std::string& id : started) {
    c_.logger.write(LogLevel::info, "schedule.fired", "a schedule started a run", {{"run_id", id}},
                    now);
  }
  return started.size();
}

}  // namespace durable::detail
