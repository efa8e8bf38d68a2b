// SPDX-License-Identifier: Apache-2.0
// RunHost: what the runtime does for one run's invocation (src/engine.hpp's Host). It carries
// out the engine's decisions (src/decision.hpp): bodies on the step threads, with the run's fiber
// parked meanwhile; their entries, transactions and a resident run's journal through the loop's
// group commit or the one writer; a resident run's parks; the hand-over of a run whose body was
// abandoned. And it answers the engine's reads: the clock, the event horizon, a body's progress.

#include <algorithm>
#include <chrono>
#include <thread>

#include "runtime_core.hpp"
#include "serialization.hpp"

namespace durable::detail {

RuntimeCore::RunHost::RunHost(RuntimeCore& core, Claim& claim, Turn& turn,
                              const std::function<void()>& let_go)
    : core_(&core), claim_(&claim), run_(&claim.run), turn_(&turn), let_go_(&let_go) {}

Resolution RuntimeCore::RunHost::carry_out(const Decision& decision) {
  return std::visit(
      Handlers{[this](const decide::RunBodies& d) {
                 run_bodies(d.bodies);
                 return Resolution{};
               },
               [this](const decide::WriteTransaction& d) {
                 write_transaction(d.write, d.done);
                 return Resolution{};
               },
               [this](const decide::Journal& d) { return Resolution{journal_now(d.entries)}; },
               [this](const decide::Park& d) { return Resolution{true, park_until(d.wake_ms)}; },
               [this](const decide::HandOver& d) {
                 hand_over(d.outcome);
                 return Resolution{};
               },
               [this](const decide::Linger& d) {
                 linger(d.done);
                 return Resolution{};
               },
               [this](const decide::WriteNested& d) { return Resolution{write_nested(d.write)}; },
               [this](const decide::WriteStream& d) {
                 write_stream_now(d.stream, d.value);
                 return Resolution{};
               },
               [this](const decide::SaveProgress& d) {
                 save_progress(d.key, d.attempt, d.progress);
                 return Resolution{};
               }},
      decision);
}

void RuntimeCore::RunHost::run_bodies(std::vector<BodyTask>& tasks) {
  std::vector<std::function<void()>> bodies;
  bodies.reserve(tasks.size());
  for (BodyTask& task : tasks) {
    bodies.emplace_back([this, &task] {
      task.run();
      journal_ended(task);
    });
  }
  FiberScheduler* scheduler = FiberScheduler::current();
  if (scheduler == nullptr || !scheduler->on_fiber()) {
    // A nested batch on a step thread, or a build without fibers: each body's entry is written
    // by its own thread.
    core_->step_pool().run_all(bodies);
    return;
  }
  // On a fiber, the loop commits the entries of bodies that ended between its other work; their
  // threads take their next bodies meanwhile.
  group_ = CommitGroup::current();
  scheduler->run_bodies(bodies);
  if (group_ != nullptr) group_->wait_queued(queued_);
  group_ = nullptr;
}

// From the body's step thread, once it ran: the entry it ended in, if it is to be journaled as
// it ends. With a loop to commit it, queued for the loop's next group commit; else at once.
// Nothing throws out of the body's thread: how it came out goes to task.written.
void RuntimeCore::RunHost::journal_ended(BodyTask& task) {
  const EntryWrite* entry = task.ended ? task.ended() : nullptr;
  if (entry == nullptr) return;
  if (group_ == nullptr) {
    write_at_once(*entry, task.written, [this](const EntryWrite& e) { return write_nested(e); });
    return;
  }
  try {
    group_->queue(*run_, *entry, task.written, queued_);
  } catch (...) {
    task.written(false, std::current_exception());
  }
}

// On a fiber, in the loop's next group commit, with other runs' writes (each transaction body
// in a savepoint of its own); elsewhere, at once.
void RuntimeCore::RunHost::write_transaction(const EntryWrite& entry, const WriteDone& done) {
  FiberScheduler* scheduler = FiberScheduler::current();
  CommitGroup* group = CommitGroup::current();
  if (scheduler == nullptr || !scheduler->on_fiber() || group == nullptr) {
    write_at_once(entry, done, [this](const EntryWrite& e) { return write_nested(e); });
    return;
  }
  group->queue(*run_, entry, done, queued_);
  group->wait_queued(queued_);
}

bool RuntimeCore::RunHost::write_nested(const EntryWrite& entry) {
  return core_->write_entry(*run_, entry);
}

bool RuntimeCore::RunHost::journal_now(std::vector<EntryWrite>& entries) {
  // Entries the step threads wrote as their bodies ended are in the journal already; a pause
  // asked for meanwhile is made by a write at this boundary, with or without entries.
  if (!entries.empty() || run_->pausing) {
    RunWrite write;
    write.run_id = run_->id;
    write.owner = core_->worker_.id;
    write.entries = &entries;
    write.now_ms = core_->now_ms();
    write.invocations = run_->invocations + 1;
    write.first_seq = run_->next_seq;  // no body of the run is running: none writes beside it
    write.boundary = true;
    // With other runs' writes, when there are any.
    const Written written = core_->commit(write);
    if (written == Written::refused) return false;
    if (written == Written::yes) run_->pausing = false;  // resumed meanwhile
    run_->next_seq += write.new_entries();
    core_->telemetry_->record(*run_, &entries, nullptr);
    if (written == Written::paused) {
      core_->logger_.write(LogLevel::info, "run.paused", "paused at a step boundary, as asked",
                           Telemetry::run_fields(*run_), write.now_ms);
      adopt(*run_, entries);
      return false;
    }
  }
  adopt(*run_, entries);
  // Stopping, or yielding its turn: the invocation ends here and the run is handed back.
  if (core_->stopping()) return false;
  yielded_ = core_->should_yield(*turn_);
  return !yielded_;
}

json RuntimeCore::RunHost::call_body(const std::string& key, int attempt, const Body& body) {
  struct Note {  // however the body ends
    RuntimeCore* core;
    std::chrono::steady_clock::time_point began = core->env().steady_now();
    ~Note() { core->note_body(core->env().steady_now() - began); }
  } note{core_};
  if (core_->body_hook_) return core_->body_hook_(run_->id, key, attempt, body);
  return body();
}

std::int64_t RuntimeCore::RunHost::event_horizon() {
  std::lock_guard lock(core_->store_mutex_);
  return core_->store_->event_horizon();
}

void RuntimeCore::RunHost::check_child(std::string_view workflow, const json& input) {
  const std::shared_ptr<const Workflow> wf = core_->find_workflow(workflow);
  if (!wf) core_->unknown_workflow(workflow);
  wf->check_input(input);
}

// A body abandoned at its timeout still runs: the outcome is written now and the run let go, so
// that it goes on elsewhere while this invocation lingers.
void RuntimeCore::RunHost::hand_over(Outcome& outcome) {
  handed_over_ = true;
  if (core_->conclude(*claim_, outcome, yielded_)) {
    // It would go on here at once: it is let go instead, for the next claim (here or in
    // another process) to go on with while this invocation waits for its abandoned body.
    core_->writer_.alone([&](ClaimStore& store) {
      return store.release(run_->id, core_->worker_.id, core_->now_ms(),
                           "let go: a step attempt abandoned at its timeout still runs here");
    });
  }
  (*let_go_)();
}

void RuntimeCore::RunHost::linger(const std::function<bool()>& done) {
  FiberScheduler* scheduler = FiberScheduler::current();
  const bool on_fiber = scheduler != nullptr && scheduler->on_fiber();
  if (on_fiber) scheduler->set_lingering(true);
  while (!done()) {
    const auto until = core_->env().steady_now() + std::chrono::milliseconds(20);
    if (on_fiber) {
      scheduler->sleep_until(until);  // the other runs' fibers go on meanwhile
    } else {
      core_->env().sleep_until(until);
    }
  }
  if (on_fiber) scheduler->set_lingering(false);
}

void RuntimeCore::RunHost::save_progress(const std::string& key, int attempt,
                                         const json& progress) {
  if (core_->halted_) return;  // the crash sweep's crash: nothing more is written
  const std::string text = storable_text(progress, "the progress of step '" + key + "'",
                                         core_->options_.max_output_bytes);
  const ProgressWrite write{run_->id, core_->worker_.id, key, attempt, text, core_->now_ms()};
  Writer::Request request;
  request.progress = {&write};
  core_->writer_.write(request);
}

std::optional<json> RuntimeCore::RunHost::load_progress(const std::string& key) {
  std::optional<StepProgress> stored;
  {
    std::lock_guard lock(core_->store_mutex_);
    stored = core_->store_->progress(run_->id, key);
  }
  if (!stored) return std::nullopt;
  return stored->progress;
}

// Waits in real time for the runtime's clock to reach wake_ms, for at most the resident sleep
// limit (a test's clock may never get there); the caller evicts the run if it did not.
std::int64_t RuntimeCore::RunHost::park_until(std::int64_t wake_ms) {
  const auto give_up =
      core_->env().steady_now() + core_->options_.resident_sleep + std::chrono::milliseconds(50);
  std::int64_t now = core_->now_ms();
  FiberScheduler* scheduler = FiberScheduler::current();
  // Stopping: give up at once; the run is written sleeping and any runtime wakes it on time.
  while (now < wake_ms && core_->env().steady_now() < give_up && !core_->stopping()) {
    const auto until = core_->env().steady_now() +
                       std::chrono::milliseconds(std::min<std::int64_t>(wake_ms - now, 10));
    if (scheduler != nullptr) {
      scheduler->sleep_until(until);  // the other runs' fibers go on meanwhile
    } else {
      core_->env().sleep_until(until);
    }
    now = core_->now_ms();
  }
  return now;
}

}  // namespace durable::detail
