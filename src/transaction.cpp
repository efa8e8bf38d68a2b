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
  PendingStep& pending = pending_.back();
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

}  // namespace durable::detail
