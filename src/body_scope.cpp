// SPDX-License-Identifier: Apache-2.0
#include "body_scope.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "attempt.hpp"
#include "errors_internal.hpp"
#include "ids.hpp"
#include "retry.hpp"

namespace durable::detail {

namespace {
thread_local BodyScope* t_scope = nullptr;
}  // namespace

std::string at_call_site() {
  const std::string site = call_site();
  return site.empty() ? std::string() : " (at " + site + ")";
}

BodyScope::BodyScope(Invocation& invocation, std::string prefix, bool transaction)
    : invocation_(&invocation),
      attempt_(Attempt::current()),
      transaction_(transaction),
      prefix_(std::move(prefix)),
      outer_(t_scope) {
  t_scope = this;
}

BodyScope::~BodyScope() { t_scope = outer_; }

BodyScope* BodyScope::current() { return t_scope; }

void BodyScope::refuse(std::string_view tool, std::string_view id) const {
  if (transaction_) {
    throw NonRetryableError(errc::misuse,
                            std::string(tool) + "('" + std::string(id) +
                                "') was called inside the body of step.transaction '" +
                                prefix_.substr(0, prefix_.size() - 1) +
                                "', which runs inside the store's write: it may use its "
                                "durable::Sql only");
  }
  throw NonRetryableError(errc::misuse,
                          std::string(tool) + "('" + std::string(id) +
                              "') was called inside the body of " +
                              invocation_->step_label(prefix_.substr(0, prefix_.size() - 1)) +
                              "; call it from the workflow function, between steps");
}

const json* BodyScope::begin_run(std::string_view id, const StepOptions& opts) {
  PendingStep& p = add(id, opts, {});
  if (p.result) return finish(p);  // journaled already
  return nullptr;
}

const json& BodyScope::run_new(Body body) {
  PendingStep& p = pending_.back();
  p.body = std::move(body);
  run(p);
  return *finish(p);
}

std::size_t BodyScope::start_step(std::string_view id, const StepOptions& opts, Body body,
                                  std::optional<std::size_t> item) {
  add(id, opts, item).body = std::move(body);
  return pending_.size() - 1;
}

const json& BodyScope::await(std::size_t slot) {
  std::vector<BodyTask> bodies;
  for (auto& p : pending_) {
    if (p.result || !p.body) continue;
    const auto body = [this, &p] {
      try {
        run(p);
      } catch (const Postpone& postpone) {
        p.postponed_until = postpone.until_ms;
      } catch (const Lost&) {
      }
    };
    bodies.push_back(BodyTask{body, nullptr, nullptr});  // each journals its own (run)
  }
  if (!bodies.empty()) invocation_->host_->carry_out(decide::RunBodies{bodies});
  std::optional<std::int64_t> postponed;
  for (auto& p : pending_) {
    if (p.lost) throw Lost{};
    if (p.postponed_until)
      postponed = std::min(postponed.value_or(*p.postponed_until), *p.postponed_until);
  }
  if (postponed) throw Postpone{*postponed};
  return *finish(pending_.at(slot));
}

// Finds or creates the entry of the next nested call with this id. A journaled entry comes back
// with its result set; a new one (or one due for another attempt) without.
PendingStep& BodyScope::add(std::string_view id, const StepOptions& opts,
                            std::optional<std::size_t> item) {
  if (transaction_) refuse(item ? "step.map" : "step.run", id);
  check_step_id(id);
  std::string base = prefix_ + std::string(id);
  if (item) base += "[" + std::to_string(*item) + "]";
  try {
    check_step_options(opts, invocation_->step_label(base));
  } catch (const Error& e) {
    throw NonRetryableError(e.what());  // another attempt would meet the same options
  }
  // An abandoned body touches nothing of its invocation's any more: the invocation goes on
  // without it.
  const LiveHold live(attempt_);
  if (!live) throw Lost{};
  PendingStep& p = pending_.emplace_back();
  p.key = journal_key(base, ++uses_[base]);
  p.base = std::move(base);
  p.options = opts;
  std::lock_guard lock(invocation_->nested_mutex_);
  const JournalEntry* entry = invocation_->run_->journal.find(p.key);
  if (entry == nullptr) return p;
  if (entry->kind != StepKind::run) {
    const NonDeterminism error(invocation_->step_label(entry->key) + " was journaled as " +
                               describe(*entry) + ", but the code now calls step.run with it" +
                               at_call_site());
    invocation_->rules_.diverged_in_body(error, entry->key);
    throw error;
  }
  if (entry->state == StepState::retrying) {
    if (entry->wake_at_ms && *entry->wake_at_ms > invocation_->now_ms_) {
      throw Postpone{*entry->wake_at_ms};
    }
    p.attempt = entry->attempts + 1;
    p.is_new = false;
    return p;
  }
  p.result = EntryWrite{*entry, false};
  return p;
}

// Runs a nested body on this thread and journals its entry. A nested attempt abandoned at its
// timeout is waited for here: it may use this body's frames, which live only as long as it.
void BodyScope::run(PendingStep& p) {
  Invocation& in = *invocation_;
  const std::int64_t began = in.host_->now_ms();
  std::shared_ptr<Attempt> abandoned;
  std::optional<json> output;
  std::exception_ptr error;
  try {
    output = Attempt::run(
        *in.host_, p.key, p.attempt, p.options, in.config_->max_output_bytes, attempt_,
        [&in, key = p.key, attempt = p.attempt, body = p.body] {
          BodyScope inner(in, key + "/");
          return in.host_->call_body(key, attempt, body);
        },
        abandoned);
  } catch (const Postpone&) {
    throw;
  } catch (const Lost&) {
    p.lost = true;
    throw;
  } catch (...) {
    error = std::current_exception();
  }
  if (abandoned) abandoned->wait_ended();
  // The body this step is nested in may have been abandoned meanwhile: then nothing of it is
  // made or written any more.
  const LiveHold live(attempt_);
  if (!live) {
    p.lost = true;
    throw Lost{};
  }
  p.result = in.results_.ended(p, began, std::move(output), error);
  p.result->outer_attempt = attempt_ != nullptr ? attempt_->number() : 0;
  if (!in.host_->carry_out(decide::WriteNested{*p.result}).kept) {
    p.lost = true;
    throw Lost{};
  }
  std::lock_guard lock(in.nested_mutex_);
  in.run_->journal.record(p.result->entry, p.result->is_new);
}

const json* BodyScope::finish(const PendingStep& p) {
  const JournalEntry& e = p.result->entry;
  switch (e.state) {
    case StepState::completed:
      return &e.output;
    case StepState::retrying:
      throw Postpone{e.wake_at_ms.value_or(invocation_->host_->now_ms())};
    default:
      throw StepFailed(e.error.value_or(ErrorInfo{"unknown", "", e.key, e.attempts}));
  }
}

}  // namespace durable::detail
