// SPDX-License-Identifier: Apache-2.0
// What the tests that drive a store directly (below the runtime) start runs and claim with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "store.hpp"

namespace durable::test {

/// A run of workflow "w" with input {}, its own correlation id, made and due at 1 ms.
inline detail::NewRun new_run(const std::string& id) {
  detail::NewRun run;
  run.id = id;
  run.workflow = "w";
  run.correlation_id = id;
  run.input = "{}";
  run.now_ms = 1;
  run.due_ms = 1;
  return run;
}

/// A claim by `owner` of up to `limit` runs of workflow "w" at `now_ms`, with a 100 ms lease.
inline detail::ClaimRequest claim_of_w(const std::string& owner, std::int64_t now_ms,
                                       std::size_t limit = 1) {
  detail::ClaimRequest request;
  request.owner = owner;
  request.workflows = {"w"};
  request.now_ms = now_ms;
  request.lease_ms = 100;
  request.limit = limit;
  return request;
}

}  // namespace durable::test
