#include "engine.hpp"

#include <utility>

#include "errors_internal.hpp"
#include "ids.hpp"
#include "retry.hpp"
#include "serialization.hpp"

namespace durable::detail {

namespace {

constexpr std::string_view kSwallowed =
    "the workflow caught durable's own unwinding and did not rethrow it: a catch (...) in "
    "workflow code swallowed it. Catch std::exception (or durable::StepFailed) instead, or "
    "rethrow with `throw;` inside catch (...)";

std::string format_time(std::int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

Invocation::Invocation(RunState& run, const Workflow& workflow, const EngineConfig& config,
                       std::int64_t now_ms, std::mt19937_64& random)
    : run_(&run),
      workflow_(&workflow),
      config_(&config),
      now_ms_(now_ms),
      random_(&random),
      step_(*this),
      cursor_(run.journal) {}

std::string Invocation::step_label(std::string_view key) const {
  return "step '" + std::string(key) + "' of run " + run_->id;
}

Outcome Invocation::execute() {
  Outcome outcome;
  outcome.kind = Outcome::Kind::failed;
  try {
    json output = workflow_->invoke(step_, run_->input);
    outcome.kind = Outcome::Kind::completed;
    outcome.output = std::move(output);
    outcome.reason = "the workflow returned";
  } catch (const Unwind&) {
    if (!ending_) bug("an invocation of run " + run_->id + " unwound with no outcome");
    if (!swallowed_) return final_outcome(std::move(*ending_));
  } catch (const StepFailed& e) {
    outcome.error = e.info;
  } catch (...) {
    outcome.error = describe(std::current_exception());
  }
  if (ending_) {
    // Unwinding had begun and the workflow turned it into a return, another exception, or
    // another step call. What the ending step did is kept; the run fails.
    outcome.kind = Outcome::Kind::failed;
    outcome.error = ErrorInfo{"durable::Error", std::string(kSwallowed), {}, 0};
    outcome.entry = std::move(ending_->entry);
    outcome.entry_is_new = ending_->entry_is_new;
  }
  if (outcome.kind == Outcome::Kind::failed) {
    const ErrorInfo& e = *outcome.error;
    outcome.reason = e.step_id.empty() ? "the workflow threw " + e.type + ": " + e.message
                                       : "step '" + e.step_id +
                                             "' failed for good and the workflow did not "
                                             "catch StepFailed: " +
                                             e.type + ": " + e.message;
  }
  return final_outcome(std::move(outcome));
}

// Applies what the workflow could not override: a divergence fails the run, and a step that
// failed for good in this invocation is journaled with whatever the invocation ended in.
Outcome Invocation::final_outcome(Outcome outcome) {
  if (failed_step_ && !outcome.entry) {
    outcome.entry = std::move(failed_step_->entry);
    outcome.entry_is_new = failed_step_->entry_is_new;
  }
  if (diverged_) {
    outcome.kind = Outcome::Kind::failed;
    outcome.error = diverged_;
    outcome.reason = "the workflow diverged from its journal: " + diverged_->message;
  }
  return outcome;
}

void Invocation::end(Outcome outcome) {
  ending_ = std::move(outcome);
  throw Unwind{};
}

void Invocation::before_step_call(std::string_view tool, std::string_view id) {
  if (ending_) {  // the workflow swallowed the unwinding and carried on to another step
    swallowed_ = true;
    throw Unwind{};
  }
  if (diverged_) throw NonDeterminism(diverged_->message);
  if (body_) {
    throw NonRetryableError(std::string(tool) + "('" + std::string(id) +
                            "') was called inside the body of " + step_label(body_->key) +
                            "; call it from the workflow function, between steps");
  }
  if (failed_step_) {
    // The workflow caught StepFailed and went on: journal the failure first, run this step
    // in the next invocation.
    Outcome failure = std::move(*failed_step_);
    failed_step_.reset();
    end(std::move(failure));
  }
}

void Invocation::fail_for_good(JournalEntry entry, bool is_new, std::string reason) {
  Outcome failure;
  failure.kind = Outcome::Kind::step_done;
  failure.reason = std::move(reason);
  failure.entry_is_new = is_new;
  ErrorInfo info = *entry.error;
  failure.entry = std::move(entry);
  failed_step_ = std::move(failure);
  throw StepFailed(std::move(info));
}

void Invocation::diverge(const JournalEntry& entry, std::string_view tool) {
  diverged_ = ErrorInfo{"durable::NonDeterminism",
                        step_label(entry.key) + " was journaled as a " +
                            std::string(to_string(entry.kind)) + ", but the code now calls " +
                            std::string(tool) +
                            " with that id. Give the new step another id, or restore the old "
                            "code; retry() resumes the run once fixed",
                        entry.key, 0};
  throw NonDeterminism(diverged_->message);
}

const RetryPolicy& Invocation::policy_of(const StepOptions& opts) const {
  static const RetryPolicy kDefault{};
  if (opts.retry) return *opts.retry;
  if (workflow_->options().retry) return *workflow_->options().retry;
  return kDefault;
}

const json* Invocation::begin_run(std::string_view id, const StepOptions& opts) {
  before_step_call("step.run", id);
  ReplayCursor::Match match = cursor_.next(id);
  JournalEntry* entry = match.entry;
  if (entry == nullptr) {
    check_step_id(id);
    if (opts.retry) check_policy(*opts.retry, step_label(match.key));
    body_ = Body{std::move(match.key), std::string(id), &opts, 1, true};
    return nullptr;
  }
  if (entry->kind != StepKind::run) diverge(*entry, "step.run");
  switch (entry->state) {
    case StepState::completed:
      last_key_ = entry->key;
      return &entry->output;
    case StepState::failed:
      throw StepFailed(
          entry->error.value_or(ErrorInfo{"unknown", "", entry->key, entry->attempts}));
    case StepState::retrying:
      if (entry->wake_at_ms && *entry->wake_at_ms > now_ms_) {
        Outcome wait;
        wait.kind = Outcome::Kind::sleep;
        wait.wake_at_ms = *entry->wake_at_ms;
        wait.reason = step_label(entry->key) + " retries at " + format_time(wait.wake_at_ms);
        end(std::move(wait));
      }
      body_ = Body{entry->key, entry->base, &opts, entry->attempts + 1, false};
      return nullptr;
    case StepState::sleeping:
      break;
  }
  bug(step_label(entry->key) + " is a run step in state " + std::string(to_string(entry->state)));
}

Invocation::Body Invocation::end_body() {
  Body body = std::move(*body_);
  body_.reset();
  return body;
}

JournalEntry Invocation::entry_of(const Body& body) const {
  JournalEntry entry;
  entry.key = body.key;
  entry.base = body.base;
  entry.kind = StepKind::run;
  entry.attempts = body.attempt;
  entry.invocation = run_->invocations + 1;
  return entry;
}

const json& Invocation::finish_run(json output) {
  const Body body = end_body();
  JournalEntry entry = entry_of(body);
  std::string text;
  std::optional<std::string> refused;
  if (const auto problem = encode(output, text)) {
    refused = step_label(body.key) + " returned a value that cannot be journaled: " + *problem;
  } else if (text.size() > config_->max_output_bytes) {
    refused = step_label(body.key) + " returned " + human_bytes(text.size()) + "; the limit is " +
              human_bytes(config_->max_output_bytes) +
              " (RuntimeOptions::max_output_bytes). Store large data elsewhere and return a "
              "reference to it";
  }
  if (refused) {
    entry.state = StepState::failed;
    entry.error = ErrorInfo{"durable::NonRetryableError", *refused, body.key, body.attempt};
    fail_for_good(std::move(entry), body.is_new, *refused);
  }
  entry.state = StepState::completed;
  entry.output = std::move(output);
  entry.output_text = std::move(text);
  Outcome outcome;
  outcome.kind = Outcome::Kind::step_done;
  outcome.entry_is_new = body.is_new;
  outcome.reason = step_label(body.key) + " completed";
  outcome.entry = std::move(entry);
  end(std::move(outcome));
}

void Invocation::fail_run(std::exception_ptr error) {
  const Body body = end_body();
  ErrorInfo info = describe(error);
  info.step_id = body.key;
  info.attempts = body.attempt;
  const RetryPolicy& policy = policy_of(*body.options);

  std::optional<std::chrono::milliseconds> retry_after;
  bool retryable = true;
  try {
    std::rethrow_exception(error);
  } catch (const NonRetryableError&) {
    retryable = false;
  } catch (const RetryAfterError& e) {
    retry_after = e.after;
  } catch (...) {
  }

  JournalEntry entry = entry_of(body);
  entry.error = info;
  if (!retryable || body.attempt >= policy.max_attempts) {
    entry.state = StepState::failed;
    fail_for_good(std::move(entry), body.is_new,
                  step_label(body.key) + " failed for good after " + std::to_string(body.attempt) +
                      " attempt(s): " + info.type + ": " + info.message);
  }
  const auto delay = retry_after ? *retry_after : backoff(policy, body.attempt, *random_);
  entry.state = StepState::retrying;
  entry.wake_at_ms = now_ms_ + std::max<std::int64_t>(0, delay.count());
  Outcome outcome;
  outcome.kind = Outcome::Kind::sleep;
  outcome.entry_is_new = body.is_new;
  outcome.wake_at_ms = *entry.wake_at_ms;
  outcome.reason = step_label(body.key) + " attempt " + std::to_string(body.attempt) + " of " +
                   std::to_string(policy.max_attempts) + " failed (" + info.type + ": " +
                   info.message + "); next attempt at " + format_time(outcome.wake_at_ms);
  outcome.entry = std::move(entry);
  end(std::move(outcome));
}

void Invocation::bad_conversion(const json& value, std::string_view type,
                                const std::exception& error) {
  std::string shown = lenient_dump(value);
  if (shown.size() > 200) shown = shown.substr(0, 200) + "...";
  throw Error(step_label(last_key_) + ": the journaled result " + shown + " (JSON " +
              value.type_name() + ") does not convert to the step's type " + std::string(type) +
              ": " + error.what() +
              ". Convert the old form in from_json, or give the changed step a new id");
}

void Invocation::sleep_until(std::string_view id, std::int64_t wake_at_ms) {
  before_step_call("step.sleep", id);
  ReplayCursor::Match match = cursor_.next(id);
  JournalEntry* entry = match.entry;
  if (entry == nullptr) {
    check_step_id(id);
    JournalEntry sleep;
    sleep.key = std::move(match.key);
    sleep.base = std::string(id);
    sleep.kind = StepKind::sleep;
    sleep.wake_at_ms = wake_at_ms;
    sleep.invocation = run_->invocations + 1;
    Outcome outcome;
    outcome.entry_is_new = true;
    if (wake_at_ms <= now_ms_) {
      sleep.state = StepState::completed;
      outcome.kind = Outcome::Kind::step_done;
      outcome.reason = step_label(sleep.key) + ": sleep already over";
    } else {
      sleep.state = StepState::sleeping;
      outcome.kind = Outcome::Kind::sleep;
      outcome.wake_at_ms = wake_at_ms;
      outcome.reason = "sleep '" + sleep.key + "' until " + format_time(wake_at_ms);
    }
    outcome.entry = std::move(sleep);
    end(std::move(outcome));
  }
  if (entry->kind != StepKind::sleep) diverge(*entry, "step.sleep");
  if (entry->state == StepState::completed) return;
  const std::int64_t wake = entry->wake_at_ms.value_or(0);
  if (wake <= now_ms_) return;
  Outcome outcome;
  outcome.kind = Outcome::Kind::sleep;
  outcome.wake_at_ms = wake;
  outcome.reason = "sleep '" + entry->key + "' until " + format_time(wake);
  end(std::move(outcome));
}

}  // namespace durable::detail
