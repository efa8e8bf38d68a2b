// SPDX-License-Identifier: Apache-2.0
// An Admin's reads of published values (Step::publish), for GET /v1/runs/{id}/published and the
// durable command.

#include "admin.hpp"
#include "admin_pool.hpp"
#include "change_watch.hpp"
#include "durations.hpp"
#include "errors_internal.hpp"
#include "ids.hpp"
#include "serialization.hpp"
#include "store.hpp"

namespace durable::ops {

namespace {

NotFound no_run(std::string_view id) {
  return NotFound("no run with id '" + std::string(id) + "'");
}

}  // namespace

json Admin::published(std::string_view id) {
  const Lease db = lease();
  const detail::PublishedRead read = db->store->published(std::string(id), std::nullopt);
  if (!read.run_found) throw no_run(id);
  json list = json::array();
  for (const detail::PublishedValue& v : read.values) {
    list.push_back({{"key", v.key},
                    {"value", json::parse(v.value)},
                    {"version", v.version},
                    {"updated_at", detail::utc_text(v.updated_at_ms)}});
  }
  return {{"published", std::move(list)}};
}

Admin::PublishedNow Admin::published_now(std::string_view id, std::string_view key) {
  try {
    detail::check_published_key(key, "GET /v1/runs/{id}/published/{key}");
  } catch (const BadRequest&) {
    throw;
  } catch (const Error& e) {
    throw BadRequest(std::string(detail::message_of(e)));
  }
  const Lease db = lease();
  const detail::PublishedRead read = db->store->published(std::string(id), std::string(key));
  if (!read.run_found) throw no_run(id);
  PublishedNow now;
  now.ended = read.run_ended;
  if (!read.values.empty()) now.value = json::parse(read.values.front().value);
  return now;
}

detail::ChangeWatch& Admin::changes() {
  std::lock_guard lock(changes_mutex_);
  if (!changes_) {
    changes_ = std::make_shared<detail::ChangeWatch>(
        [database = path_] { return detail::open_change_feed(database); },
        RuntimeOptions{}.poll_interval, *env_);
  }
  return *changes_;
}

void Admin::share_changes(std::shared_ptr<detail::ChangeWatch> watch) {
  std::lock_guard lock(changes_mutex_);
  changes_ = std::move(watch);
}

}  // namespace durable::ops
