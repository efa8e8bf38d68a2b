// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a start, an event sent, a fork or a resolve writes, built and checked the same way
// whoever asks: a Runtime, a Client or the admin layer (the command and the HTTP API). One rule
// each, so that the same bad input gets the same error from all of them.

#include <cstddef>
#include <cstdint>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <map>
#include <string>
#include <string_view>

#include "env.hpp"
#include "lifecycle.hpp"
#include "store.hpp"

namespace durable::detail {

/// The run to write for a start of `workflow`: the input's stored text, a new id of `env`, the
/// correlation id asked for (a new one when empty), the idempotency key, and due at `opts.at`
/// (never before the Env's now), its deadline, priority and tags. Throws Error for an empty
/// workflow name, a deadline that has passed, tags check_tags() refuses, and (from storable_text)
/// for an input that cannot be stored or whose text is longer than `max_bytes`.
NewRun new_run(std::string_view workflow, const json& input, const StartOptions& opts, Env& env,
               std::size_t max_bytes);

/// The highest priority a run may have (and the lowest, negated).
inline constexpr int kMaxPriority = 1'000'000;
/// The most tags a run may have, and the longest key or value, in bytes.
inline constexpr std::size_t kMaxTags = 32;
inline constexpr std::size_t kMaxTagBytes = 256;
/// Throws Error for more than kMaxTags tags, an empty key or value, or one that is not UTF-8 or
/// is longer than kMaxTagBytes.
void check_tags(const std::map<std::string, std::string>& tags);

/// A deadline given as text (the command's --deadline, the HTTP API's "deadline"): a UTC time
/// ("2026-11-27T18:00:00Z") or a duration from now_ms ("30m"), in ms since the epoch. Throws
/// Error for other text.
std::int64_t deadline_from_text(std::string_view text, std::int64_t now_ms);
/// Tags given as text ("tenant=acme,plan=gold"). Throws Error for a pair without '=', and for
/// what check_tags() refuses.
std::map<std::string, std::string> tags_from_text(std::string_view text);

/// A traceparent given by a caller (StartOptions::traceparent), normalized: empty for empty.
/// Throws Error for text that is not a W3C traceparent.
std::string checked_traceparent(std::string_view text);

/// Says in the run's history that no worker has registered its workflow yet: the run waits for
/// one that has it.
void mark_unregistered(NewRun& run);

/// The event to store for send_event(name, data). Throws Error for an empty name, and (from
/// storable_text) for data that cannot be stored or whose text is longer than `max_bytes`.
NewEvent new_event(std::string_view name, const json& data, Env& env, std::size_t max_bytes);

/// Throws Error, saying it is `what`, for a mailbox topic that is empty, longer than
/// kMaxTopicBytes, not UTF-8, or holds '/' (it is a path segment in HTTP) or a control character.
void check_topic(std::string_view topic, const std::string& what);
inline constexpr std::size_t kMaxTopicBytes = 200;

/// The message to store for Runtime::send(run_id, topic, data). Throws Error for a bad topic
/// (check_topic) and (from storable_text) for data that cannot be stored or whose text is longer
/// than `max_bytes`.
NewMessage new_message(std::string_view run_id, std::string_view topic, const json& data,
                       std::int64_t now_ms, std::size_t max_bytes);

/// What Runtime::send, Client::send and the HTTP API make of the store's answer: NotFound for
/// an unknown run, RunStateRefused (an Error) for one that has ended; true when a waiting
/// receive took the message.
bool message_sent(Sent sent, const NewMessage& message);

/// The new run of a fork of `run_id` (Runtime::fork): a new id, due now (both `env`'s);
/// Store::fork fills in the rest from the original.
NewRun new_fork(std::string_view run_id, Env& env);

/// The stored text of the output an operator gives to resolve step `key` of `run_id`. Throws
/// Error (from storable_text) for an output that cannot be stored or is longer than `max_bytes`.
std::string resolution_text(std::string_view run_id, std::string_view key, const json& output,
                            std::size_t max_bytes);

/// Throws Error, naming the workflow, for flow control options that cannot work: a negative
/// concurrency, a key that is not a JSON pointer ("" or "/a/b"), a concurrency_key without a
/// concurrency, a rate limit below 0 or with a period under 1 ms.
void check_flow(const std::string& workflow, const WorkflowOptions& options);
/// The claims' rule of a workflow's options (its concurrency and rate limits).
FlowRule flow_rule(const WorkflowOptions& options);

/// The NotFound for a run id the database does not hold.
NotFound no_such_run(std::string_view run_id);

}  // namespace durable::detail
