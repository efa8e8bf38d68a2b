// SPDX-License-Identifier: Apache-2.0
// Step::transaction on the engine's side: its attempt is not run on a step thread but handed to
// the store with its entry, whose transaction runs the body (src/store/transactions.cpp).

#include <utility>

#include "body_scope.hpp"
#include "engine.hpp"
#include "sql_access.hpp"

namespace durable {

std::int64_t Sql::call(std::string_view text, const std::vector<json>& params, json* rows) {
  if (session_ == nullptr) {
    throw Error(errc::misuse,
                "the durable::Sql of step '" + step_ +
                    "' was used after its body returned: it is valid during the body's call only, "
                    "inside the step's transaction");
  }
  return session_->run(text, params, rows);
}

}  // namespace durable

namespace durable::detail {

const json* Invocation::begin_transaction(std::string_view id, const StepOptions& opts) {
  if (BodyScope* nested = scope()) nested->refuse("step.transaction", id);
  return begin_run(id, opts);
}

const json* Invocation::run_transaction(TransactionBody body) {
  Pending& pending = pending_.back();
  pending.transaction = std::move(body);
  return await(pending.slot);
}

std::size_t Invocation::start_transaction(std::string_view id, const StepOptions& opts,
                                          TransactionBody body) {
  if (BodyScope* nested = scope()) nested->refuse("step.start (of a transaction)", id);
  const std::size_t pending = pending_.size();
  const std::size_t slot = start_step(id, opts, {}, std::nullopt);
  // A new step (or one to be retried) is pending now; a journaled one is only a slot.
  if (pending_.size() > pending) pending_.back().transaction = std::move(body);
  return slot;
}

void Invocation::write_transaction(Pending& p) {
  EntryWrite write{entry_of(p), p.is_new, std::make_shared<TransactionStep>()};
  write.entry.state = StepState::completed;  // until the store runs the body
  TransactionStep& tx = *write.transaction;
  const std::int64_t began = host_->now_ms();
  tx.run = [this, &p, began](SqlSession& session) {
    const BodyScope scope(*this, p.key + "/", true);  // step tools refuse inside
    Sql& sql = *sqls_.emplace_back(SqlAccess::make(session, p.key));
    struct End {
      Sql* sql;
      ~End() { SqlAccess::end(*sql); }
    } end{&sql};
    // Through call_body like any body: the test kit sees it (mocks, the crash sweep).
    json output = host_->call_body(p.key, p.attempt, [&] { return p.transaction(sql); });
    if (host_->halted()) throw Halted{};
    EntryWrite done = output_entry(p, std::move(output));
    // A result that cannot be journaled fails the step: its writes must not commit without it.
    if (done.entry.state != StepState::completed) {
      throw NonRetryableError(done.entry.error ? done.entry.error->message : "not journaled");
    }
    done.entry.started_at_ms = began;
    done.entry.duration_ms = host_->now_ms() - began;
    return done;
  };
  tx.failed = [this, &p, began](std::exception_ptr error) {
    if (host_->halted()) throw Halted{};  // the crash sweep's crash: nothing is written
    EntryWrite failed = attempt_failed(p, std::move(error));
    failed.entry.started_at_ms = began;
    failed.entry.duration_ms = host_->now_ms() - began;
    return failed;
  };
  p.result = std::move(write);
  try {
    host_->carry_out(decide::WriteTransaction{*p.result, when_written(p)});
  } catch (...) {
    p.write_error = std::current_exception();
  }
  // A host that runs nothing (testing::replay's) left it unwritten: a step not done yet.
  if (!p.written && !p.lost && !p.write_error) p.result.reset();
}

}  // namespace durable::detail
