// SPDX-License-Identifier: Apache-2.0
// Step's non-template members: each forwards to the invocation that owns the Step.

#include <durable/step.hpp>

#include "durations.hpp"
#include "engine.hpp"

namespace durable {

namespace detail {
namespace {
thread_local SourceLocation t_where;
}
void note_call(const SourceLocation& where) noexcept { t_where = where; }
std::string call_site() {
  if (t_where.line() == 0) return {};
  return std::string(t_where.file_name()) + ":" + std::to_string(t_where.line());
}
}  // namespace detail

const json* Step::begin_run(std::string_view id, const StepOptions& opts) {
  return invocation_->begin_run(id, opts);
}
const json* Step::run_new(detail::Body body) { return invocation_->run_new(std::move(body)); }
const json* Step::begin_transaction(std::string_view id, const StepOptions& opts) {
  return invocation_->begin_transaction(id, opts);
}
const json* Step::run_transaction(detail::TransactionBody body) {
  return invocation_->run_transaction(std::move(body));
}
std::size_t Step::start_step(std::string_view id, const StepOptions& opts, detail::Body body,
                             std::optional<std::size_t> item) {
  return invocation_->start_step(id, opts, std::move(body), item);
}
std::size_t Step::start_transaction(std::string_view id, const StepOptions& opts,
                                   detail::TransactionBody body) {
  return invocation_->start_transaction(id, opts, std::move(body));
}
const json* Step::await(std::size_t slot) { return invocation_->await(slot); }
void Step::end_invocation() { invocation_->unwind(); }
bool Step::ready(std::size_t slot) const { return invocation_->ready(slot); }
void Step::bad_conversion(const json& value, std::string_view type, const std::exception& error) {
  invocation_->bad_conversion(value, type, error);
}

void Step::sleep_for(std::string_view id, std::chrono::duration<double, std::milli> d) {
  invocation_->sleep_for(id, detail::whole_milliseconds(d));
}
void Step::sleep(std::string_view id, std::string_view d, detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->sleep_for(id, detail::parse_duration(d));
}
void Step::sleep_until(std::string_view id, Clock::time_point t, detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->sleep_until(id, detail::to_ms(t));
}

std::optional<json> Step::wait_for_event(std::string_view id, std::string_view event,
                                         WaitOptions opts, detail::SourceLocation where) {
  detail::note_call(where);
  return invocation_->wait_for_event(id, event, opts);
}
void Step::send_event(std::string_view id, std::string_view event, json data,
                      detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->send_event(id, event, std::move(data));
}
std::optional<json> Step::receive(std::string_view id, std::string_view topic,
                                  std::chrono::milliseconds timeout, detail::SourceLocation where) {
  detail::note_call(where);
  return invocation_->receive(id, topic, timeout);
}
json Step::invoke(std::string_view id, std::string_view workflow, json input,
                  detail::SourceLocation where) {
  detail::note_call(where);
  return invocation_->invoke(id, workflow, std::move(input));
}

void Step::publish(std::string_view key, json value, detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->publish(key, std::move(value));
}

void Step::set_tags(std::map<std::string, std::string> tags, detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->set_tags(std::move(tags));
}
void Step::write_stream(std::string_view stream, json value, detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->write_stream(stream, std::move(value));
}
void Step::close_stream(std::string_view stream, detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->close_stream(stream);
}

bool Step::patched(std::string_view id, detail::SourceLocation where) {
  detail::note_call(where);
  return invocation_->patched(id);
}
void Step::deprecate_patch(std::string_view id, detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->deprecate_patch(id);
}
void Step::continue_as_new(json input, detail::SourceLocation where) {
  detail::note_call(where);
  invocation_->continue_as_new(std::move(input));
}
Clock::time_point Step::now(std::string_view id, detail::SourceLocation where) {
  detail::note_call(where);
  const auto ms = convert<std::int64_t>(invocation_->now_value(id));
  return Clock::time_point(std::chrono::milliseconds(ms));
}
std::string Step::uuid(std::string_view id, detail::SourceLocation where) {
  detail::note_call(where);
  return convert<std::string>(invocation_->uuid_value(id));
}
std::uint64_t Step::random(std::string_view id, detail::SourceLocation where) {
  detail::note_call(where);
  return convert<std::uint64_t>(invocation_->random_value(id));
}

std::string_view Step::run_id() const { return invocation_->run_id(); }
std::string_view Step::correlation_id() const { return invocation_->correlation_id(); }
std::string Step::traceparent() const { return invocation_->traceparent(); }
bool Step::replaying() const { return invocation_->replaying(); }

}  // namespace durable
