// SPDX-License-Identifier: Apache-2.0
#include "run_requests.hpp"

#include <algorithm>

#include "durations.hpp"
#include "ids.hpp"
#include "serialization.hpp"
#include "trace_context.hpp"

namespace durable::detail {

NewRun new_run(std::string_view workflow, const json& input, const StartOptions& opts, Env& env,
               std::size_t max_bytes) {
  if (workflow.empty()) throw Error(errc::invalid_argument, "a run needs a workflow name");
  check_utf8(workflow, "the workflow name");
  check_utf8(opts.correlation_id, "the correlation id");
  check_utf8(opts.idempotency_key, "the idempotency key");
  NewRun run;
  // Stored form first: it refuses a value nested too deep before anything copies it.
  run.input =
      storable_text(input, "the input of a run of '" + std::string(workflow) + "'", max_bytes);
  const std::int64_t now_ms = env.now_ms();
  run.id = env.new_id();
  run.workflow = std::string(workflow);
  run.correlation_id = opts.correlation_id.empty() ? env.new_id() : opts.correlation_id;
  run.idempotency_key = opts.idempotency_key;
  run.now_ms = now_ms;
  run.due_ms = opts.at ? std::max(now_ms, to_ms(*opts.at)) : now_ms;
  if (opts.deadline) {
    run.deadline_ms = to_ms(*opts.deadline);
    if (run.deadline_ms <= now_ms) {
      throw Error(errc::invalid_argument, "the deadline of a run of '" + std::string(workflow) +
                                              "' (" + utc_text(run.deadline_ms) +
                                              ") has passed already");
    }
  }
  if (opts.priority < -kMaxPriority || opts.priority > kMaxPriority) {
    throw Error(errc::invalid_argument, "a run's priority is a whole number from " +
                                            std::to_string(-kMaxPriority) + " to " +
                                            std::to_string(kMaxPriority) + ", not " +
                                            std::to_string(opts.priority));
  }
  run.priority = opts.priority;
  // A start that names an idempotency key is not folded into another run: the key would be lost.
  run.debounce = opts.idempotency_key.empty();
  check_tags(opts.tags);
  run.tags = opts.tags;
  run.traceparent = checked_traceparent(opts.traceparent);
  return run;
}

void check_tags(const std::map<std::string, std::string>& tags) {
  if (tags.size() > kMaxTags) {
    throw Error(errc::too_large, "a run has at most " + std::to_string(kMaxTags) + " tags; " +
                                     std::to_string(tags.size()) + " were given");
  }
  for (const auto& [key, value] : tags) {
    if (key.empty() || value.empty()) {
      throw Error(errc::invalid_argument,
                  "a tag needs a non-empty key and value" +
                      (key.empty() ? std::string() : " (tag '" + key + "' has an empty value)"));
    }
    check_utf8(key, "a tag's key");
    check_utf8(value, "the value of tag '" + key + "'");
    if (key.size() > kMaxTagBytes || value.size() > kMaxTagBytes) {
      throw Error(errc::too_large, "tag '" + key.substr(0, 40) + "' is longer than " +
                                       std::to_string(kMaxTagBytes) +
                                       " bytes (its key or its value)");
    }
  }
}

std::string checked_traceparent(std::string_view text) {
  if (text.empty()) return {};
  const std::optional<trace::TraceParent> parent = trace::parse_traceparent(text);
  if (!parent) {
    throw Error(errc::invalid_argument,
                "'" + std::string(text.substr(0, 80)) +
                    "' is not a W3C traceparent: it is \"00-\", 32 lowercase hex digits (the trace "
                    "id, not all 0), \"-\", 16 (the parent span id, not all 0), \"-\" and 2 (the "
                    "flags)");
  }
  return trace::format_traceparent(*parent);
}

void mark_unregistered(NewRun& run) {
  run.reason = "started; no worker has registered workflow '" + run.workflow +
               "' yet: the run waits for one that has it";
}

NewEvent new_event(std::string_view name, const json& data, Env& env, std::size_t max_bytes) {
  if (name.empty()) throw Error(errc::invalid_argument, "an event needs a name");
  check_utf8(name, "the event name");
  NewEvent event;
  event.data = storable_text(data, "the data of event '" + std::string(name) + "'", max_bytes);
  event.id = env.new_id();
  event.name = std::string(name);
  event.now_ms = env.now_ms();
  return event;
}

void check_topic(std::string_view topic, const std::string& what) {
  if (topic.empty()) throw Error(errc::invalid_argument, what + " is empty; a topic needs a name");
  if (topic.size() > kMaxTopicBytes) {
    throw Error(errc::too_large, what + " is " + std::to_string(topic.size()) +
                                     " bytes long; the limit is " + std::to_string(kMaxTopicBytes));
  }
  check_utf8(topic, what);
  for (const char c : topic) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      throw Error(errc::invalid_argument, what + " " + lenient_dump(json(std::string(topic))) +
                                              " holds '/' or a control character; a topic may not");
    }
  }
}

NewMessage new_message(std::string_view run_id, std::string_view topic, const json& data,
                       std::int64_t now_ms, std::size_t max_bytes) {
  check_topic(topic, "the topic of a message to run " + std::string(run_id));
  NewMessage message;
  message.data = storable_text(
      data, "the message on '" + std::string(topic) + "' to run " + std::string(run_id), max_bytes);
  message.run_id = std::string(run_id);
  message.topic = std::string(topic);
  message.now_ms = now_ms;
  return message;
}

bool message_sent(Sent sent, const NewMessage& message) {
  switch (sent) {
    case Sent::no_run:
      throw no_such_run(message.run_id);
    case Sent::ended:
      throw RunStateRefused("run " + message.run_id + " has ended; the message on '" +
                            message.topic + "' would never be received, so it was not stored");
    case Sent::kept:
      return false;
    case Sent::delivered:
      return true;
  }
  return false;
}

NewRun new_fork(std::string_view run_id, Env& env) {
  NewRun fork;
  fork.id = env.new_id();
  fork.forked_from = std::string(run_id);
  fork.now_ms = fork.due_ms = env.now_ms();
  return fork;
}

std::string resolution_text(std::string_view run_id, std::string_view key, const json& output,
                            std::size_t max_bytes) {
  return storable_text(
      output,
      "the output given to resolve step '" + std::string(key) + "' of run " + std::string(run_id),
      max_bytes);
}

NotFound no_such_run(std::string_view run_id) {
  return NotFound("no run with id '" + std::string(run_id) + "'");
}

}  // namespace durable::detail

namespace durable::detail {

std::int64_t deadline_from_text(std::string_view text, std::int64_t now_ms) {
  std::optional<std::int64_t> at = parse_utc_text(text);
  if (!at) {
    try {
      at = now_ms + parse_duration(text).count();
    } catch (const Error&) {
      throw Error(
          errc::invalid_argument,
          "deadline '" + std::string(text) +
              "' is neither a UTC time (2026-11-27T18:00:00Z) nor a duration from now (30m, "
              "2h, 1 day)");
    }
  }
  // A time point of the system clock counts nanoseconds: it holds the years 1677 to 2262. A
  // time outside would overflow as it becomes one, into any time (0300-01-01 into 2053).
  if (*at > to_ms(Clock::time_point::max()) - 1) {
    throw Error(errc::invalid_argument, "deadline '" + std::string(text) +
                                            "' is past the last time this clock holds (" +
                                            utc_text(to_ms(Clock::time_point::max()), false) + ")");
  }
  if (*at < to_ms(Clock::time_point::min())) {
    throw Error(errc::invalid_argument, "deadline '" + std::string(text) +
                                            "' is before the first time this clock holds (" +
                                            utc_text(to_ms(Clock::time_point::min()), false) + ")");
  }
  return *at;
}

std::map<std::string, std::string> tags_from_text(std::string_view text) {
  std::map<std::string, std::string> tags;
  std::size_t from = 0;
  while (from <= text.size()) {
    const std::size_t comma = std::min(text.find(',', from), text.size());
    const std::string_view pair = text.substr(from, comma - from);
    const std::size_t eq = pair.find('=');
    if (eq == std::string_view::npos) {
      throw Error(errc::invalid_argument,
                  "tag '" + std::string(pair) + "' is not KEY=VALUE (tags: KEY=VALUE,KEY=VALUE)");
    }
    tags[std::string(pair.substr(0, eq))] = std::string(pair.substr(eq + 1));
    from = comma + 1;
  }
  check_tags(tags);
  return tags;
}

}  // namespace durable::detail

namespace durable::detail {

namespace {

void check_pointer(const std::string& workflow, const char* what, const std::string& pointer) {
  try {
    (void)json::json_pointer(pointer);
  } catch (const json::exception&) {
    throw Error(errc::invalid_argument,
                "workflow '" + workflow + "': " + what + " '" + pointer +
                    "' is not a JSON pointer into the input (\"/tenant\", \"/account/id\")");
  }
}

}  // namespace

void check_flow(const std::string& workflow, const WorkflowOptions& options) {
  if (options.concurrency < 0) {
    throw Error(errc::invalid_argument, "workflow '" + workflow +
                                            "': concurrency must be 0 (no limit) or more, not " +
                                            std::to_string(options.concurrency));
  }
  check_pointer(workflow, "concurrency_key", options.concurrency_key);
  if (!options.concurrency_key.empty() && options.concurrency == 0) {
    throw Error(errc::invalid_argument,
                "workflow '" + workflow + "': concurrency_key '" + options.concurrency_key +
                    "' needs a concurrency (how many runs per key may run at once)");
  }
  const RateLimit& rate = options.rate_limit;
  if (rate.limit < 0) {
    throw Error(errc::invalid_argument, "workflow '" + workflow +
                                            "': rate_limit.limit must be 0 (none) or more, not " +
                                            std::to_string(rate.limit));
  }
  if (rate.limit > 0 && rate.period.count() < 1) {
    throw Error(errc::invalid_argument,
                "workflow '" + workflow + "': rate_limit.period must be at least 1 ms");
  }
  check_pointer(workflow, "rate_limit.key", rate.key);
  if (options.debounce.period.count() < 0) {
    throw Error(errc::invalid_argument,
                "workflow '" + workflow + "': debounce.period must be 0 (none) or more");
  }
  if (options.deadline.count() < 0) {
    throw Error(errc::invalid_argument,
                "workflow '" + workflow + "': deadline must be 0 (none) or more");
  }
  check_pointer(workflow, "debounce.key", options.debounce.key);
}

FlowRule flow_rule(const WorkflowOptions& options) {
  FlowRule rule;
  rule.concurrency = options.concurrency;
  rule.concurrency_key = options.concurrency_key;
  if (options.rate_limit.limit > 0) {
    rule.rate_limit = options.rate_limit.limit;
    rule.rate_period_ms = options.rate_limit.period.count();
    rule.rate_key = options.rate_limit.key;
  }
  if (options.debounce.period.count() > 0) {
    rule.debounce_ms = options.debounce.period.count();
    rule.debounce_key = options.debounce.key;
  }
  rule.deadline_ms = std::max<std::int64_t>(0, options.deadline.count());
  return rule;
}

}  // namespace durable::detail
