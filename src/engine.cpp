#include "engine.hpp"

#include <utility>

#include "errors_internal.hpp"
#include "ids.hpp"
#include "retry.hpp"

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
  Outcome failed;
  failed.kind = Outcome::Kind::failed;
  try {
    json output = workflow_->invoke(step_, run_->input);
    if (ending_) {
      failed.error = ErrorInfo{"durable::Error", std::string(kSwallowed), {}, 0};
    } else {
      Outcome done;
      done.kind = Outcome::Kind::completed;
      done.output = std::move(output);
      done.reason = "the workflow returned";
      return done;
    }
  } catch (const Unwind&) {
    if (ending_ && !swallowed_) return std::move(*ending_);
    if (!ending_) bug("an invocation of run " + run_->id + " unwound with no outcome");
  } catch (const StepFailed& e) {
    failed.error = e.info;
  } catch (...) {
    failed.error = describe(std::current_exception());
  }
  if (ending_) {
    // Unwinding had begun and the workflow turned it into another exception or a return.
    failed.error = ErrorInfo{"durable::Error", std::string(kSwallowed), {}, 0};
    failed.entry = std::move(ending_->entry);
    failed.entry_is_new = ending_->entry_is_new;
  }
  failed.reason = "the workflow threw " + failed.error->type + ": " + failed.error->message;
  return failed;
}

void Invocation::end(Outcome outcome) {
  ending_ = std::move(outcome);
  throw Unwind{};
}

void Invocation::refuse_inside_body(std::string_view tool, std::string_view id) {
  if (ending_) {  // the workflow swallowed the unwinding and carried on to another step
    swallowed_ = true;
    throw Unwind{};
  }
  if (body_) {
    throw Error(std::string(tool) + "('" + std::string(id) + "') was called inside the body of " +
                step_label(body_->key) +
                "; call it from the workflow function, between steps");
  }
}

const RetryPolicy& Invocation::policy_of(const StepOptions& opts) const {
  static const RetryPolicy kDefault{};
  if (opts.retry) return *opts.retry;
  if (workflow_->options().retry) return *workflow_->options().retry;
  return kDefault;
}

const json* Invocation::begin_run(std::string_view id, const StepOptions& opts) {
  refuse_inside_body("step.run", id);
  ReplayCursor::Match match = cursor_.next(id);
  JournalEntry* entry = match.entry;
  if (entry == nullptr) {
    check_step_id(id);
    if (opts.retry) check_policy(*opts.retry, step_label(match.key));
    body_ = Body{std::move(match.key), std::string(id), &opts, 1, true};
    return nullptr;
  }
  if (entry->kind != StepKind::run) {
    throw NonDeterminism(step_label(entry->key) + " was journaled as a " +
                         std::string(to_string(entry->kind)) +
                         ", but the code now calls step.run with that id. Give the new step "
                         "another id, or restore the old code; retry() resumes the run once fixed");
  }
  switch (entry->state) {
    case StepState::completed:
      last_key_ = entry->key;
      return &entry->output;
    case StepState::failed:
      throw StepFailed(entry->error.value_or(ErrorInfo{"unknown", "", entry->key, entry->attempts}));
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
  Body body = std::move(*body_);
  body_.reset();
  JournalEntry entry = entry_of(body);
  std::string text = output.dump();
  const std::size_t size = text.size();
  Outcome outcome;
  outcome.kind = Outcome::Kind::step_done;
  outcome.entry_is_new = body.is_new;
  if (size > config_->max_output_bytes) {
    entry.state = StepState::failed;
    entry.error = ErrorInfo{"durable::NonRetryableError",
                            step_label(body.key) + " returned " + human_bytes(size) +
                                "; the limit is " + human_bytes(config_->max_output_bytes) +
                                " (RuntimeOptions::max_output_bytes). Store large data elsewhere "
                                "and return a reference to it",
                            body.key, body.attempt};
    outcome.reason = entry.error->message;
  } else {
    entry.state = StepState::completed;
    entry.output = std::move(output);
    entry.output_text = std::move(text);
    outcome.reason = step_label(body.key) + " completed";
  }
  outcome.entry = std::move(entry);
  end(std::move(outcome));
}

void Invocation::fail_run(std::exception_ptr error) {
  Body body = std::move(*body_);
  body_.reset();
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
  Outcome outcome;
  outcome.entry_is_new = body.is_new;
  if (!retryable || body.attempt >= policy.max_attempts) {
    entry.state = StepState::failed;
    outcome.kind = Outcome::Kind::step_done;
    outcome.reason = step_label(body.key) + " failed for good after " +
                     std::to_string(body.attempt) + " attempt(s): " + info.type + ": " +
                     info.message;
  } else {
    const auto delay = retry_after ? *retry_after : backoff(policy, body.attempt, *random_);
    entry.state = StepState::retrying;
    entry.wake_at_ms = now_ms_ + std::max<std::int64_t>(0, delay.count());
    outcome.kind = Outcome::Kind::sleep;
    outcome.wake_at_ms = *entry.wake_at_ms;
    outcome.reason = step_label(body.key) + " attempt " + std::to_string(body.attempt) + " of " +
                     std::to_string(policy.max_attempts) + " failed (" + info.type + ": " +
                     info.message + "); next attempt at " + format_time(outcome.wake_at_ms);
  }
  outcome.entry = std::move(entry);
  end(std::move(outcome));
}

void Invocation::bad_conversion(const json& value, std::string_view type,
                                const std::exception& error) {
  std::string shown = value.dump();
  if (shown.size() > 200) shown = shown.substr(0, 200) + "...";
  throw Error(step_label(last_key_) + ": the journaled result " + shown +
              " (JSON " + value.type_name() + ") does not convert to the step's type " +
              std::string(type) + ": " + error.what() +
              ". Convert the old form in from_json, or give the changed step a new id");
}

void Invocation::sleep_until(std::string_view id, std::int64_t wake_at_ms) {
  refuse_inside_body("step.sleep", id);
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
  if (entry->kind != StepKind::sleep) {
    throw NonDeterminism(step_label(entry->key) + " was journaled as a " +
                         std::string(to_string(entry->kind)) +
                         ", but the code now calls step.sleep with that id. Give the new step "
                         "another id, or restore the old code; retry() resumes the run once fixed");
  }
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
