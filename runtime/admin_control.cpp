// SPDX-License-Identifier: Apache-2.0
// The admin layer's run control: pause and resume of runs and workflows (Runtime::pause...).

#include "admin.hpp"
#include "admin_pool.hpp"
#include "bulk.hpp"
#include "errors_internal.hpp"
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

RunFilter RunQuery::filter() const {
  RunFilter f;
  f.status = status;
  f.workflow = workflow;
  f.limit = limit;
  f.correlation_id = correlation_id;
  f.tags = tags;
  f.failed_step = failed_step;
  f.error_type = error_type;
  f.created_after = created_after;
  f.created_before = created_before;
  f.cursor = cursor;
  return f;
}

bool RunQuery::any_condition() const {
  return status || !workflow.empty() || !correlation_id.empty() || !tags.empty() ||
         !failed_step.empty() || !error_type.empty() || created_after || created_before;
}

json Admin::bulk(detail::BulkAction action, const RunQuery& query, bool dry_run,
                 const std::string& reason) {
  const detail::WithStore with_store = [this](const std::function<void(detail::Store&)>& use) {
    const Lease db = lease();
    use(*db->store);
  };
  const RunFilter filter = query.filter();
  const char* name = detail::to_string(action);
  try {
    if (dry_run) {
      return {{"action", name}, {"matched", detail::bulk_count(with_store, action, filter)}};
    }
    const std::size_t n = detail::bulk_apply(
        with_store, action, filter, detail::utf8_or_replaced(reason), [this] { return now_ms(); });
    if (n > 0) changed();
    return {{"action", name}, {"changed", n}};
  } catch (const detail::BadFilter& e) {
    throw BadRequest(std::string(detail::message_of(e)));
  }
}

json Admin::pause(std::string_view id) {
  const Lease db = lease();
  std::optional<Status> before;
  try {
    before = db->store->pause(std::string(id), now_ms());
  } catch (const detail::RunStateRefused& e) {
    throw Conflict(std::string(detail::message_of(e)));
  }
  if (!before) throw detail::no_such_run(id);
  changed();
  const auto run = db->store->get_run(std::string(id), false);
  return {{"id", id}, {"status", run ? to_string(run->status) : "paused"}};
}

json Admin::resume(std::string_view id) {
  const Lease db = lease();
  std::optional<Status> before;
  try {
    before = db->store->resume(std::string(id), now_ms());
  } catch (const detail::RunStateRefused& e) {
    throw Conflict(std::string(detail::message_of(e)));
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
