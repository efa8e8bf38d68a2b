// SPDX-License-Identifier: Apache-2.0
// The admin layer's run control: pause and resume of runs and workflows (Runtime::pause...).

#include "admin.hpp"
#include "admin_pool.hpp"
#include "run_requests.hpp"
#include "serialization.hpp"
#include "store.hpp"

namespace durable::ops {

namespace {

std::string checked_workflow(std::string_view workflow) {
  if (workflow.empty()) throw BadRequest("a workflow name is needed");
  if (!detail::is_utf8(workflow)) throw BadRequest("the workflow name is not UTF-8 text");
  return std::string(workflow);
}

}  // namespace

json Admin::pause_run(std::string_view id) {
  const Lease db = lease();
  std::optional<Status> before;
  try {
    before = db->store->pause(std::string(id), now_ms());
  } catch (const detail::RunStateRefused& e) {
    throw Conflict(e.what());
  }
  if (!before) throw detail::no_such_run(id);
  changed();
  const auto run = db->store->get_run(std::string(id), false);
  return {{"id", id}, {"status", run ? to_string(run->status) : "paused"}};
}

json Admin::resume_run(std::string_view id) {
  const Lease db = lease();
  std::optional<Status> before;
  try {
    before = db->store->resume(std::string(id), now_ms());
  } catch (const detail::RunStateRefused& e) {
    throw Conflict(e.what());
  }
  if (!before) throw detail::no_such_run(id);
  changed();
  const auto run = db->store->get_run(std::string(id), false);
  return {{"id", id}, {"status", run ? to_string(run->status) : "pending"}};
}

json Admin::pause_workflow(std::string_view workflow) {
  const std::string name = checked_workflow(workflow);
  const Lease db = lease();
  const std::size_t paused = db->store->pause_workflow(name, now_ms());
  changed();
  return {{"workflow", name}, {"paused", paused}};
}

json Admin::resume_workflow(std::string_view workflow) {
  const std::string name = checked_workflow(workflow);
  const Lease db = lease();
  const std::size_t resumed = db->store->resume_workflow(name, now_ms());
  changed();
  return {{"workflow", name}, {"resumed", resumed}};
}

}  // namespace durable::ops
