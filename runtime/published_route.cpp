// SPDX-License-Identifier: Apache-2.0
// GET /v1/runs/{id}/published and /v1/runs/{id}/published/{key}?wait_ms=N (docs/http-api.md).
//
// A wait holds no thread and no database connection while it waits: the first read runs on the
// handler thread; when it finds nothing and the run goes on, the request parks (HttpResponse::
// later) with an async wait on the Admin's ChangeWatch, whose callback posts the next read to a
// handler thread. The read comes after a mark of the watch, so a value published between the
// two wakes the wait at once.

#include <charconv>
#include <memory>

#include "api.hpp"
#include "change_watch.hpp"

namespace durable::ops {

namespace {

/// The longest wait_ms taken: a longer one is refused, so that a request cannot hold its
/// connection for hours.
constexpr std::int64_t kMaxWaitMs = 60'000;

std::chrono::milliseconds wait_of(const HttpRequest& request) {
  const auto it = request.query.find("wait_ms");
  if (it == request.query.end()) return {};
  const std::string& text = it->second;
  std::int64_t ms = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || ms < 0 ||
      ms > kMaxWaitMs) {
    throw BadRequest("wait_ms must be a whole number of milliseconds from 0 to " +
                     std::to_string(kMaxWaitMs) + ", not '" + text + "'");
  }
  return std::chrono::milliseconds(ms);
}

HttpResponse answer(const std::optional<json>& value) {
  if (!value) return json_response(200, {{"published", false}});
  return json_response(200, {{"published", true}, {"value", *value}});
}

// One parked request: reads, and waits again, until it can answer.
class PublishedWait : public std::enable_shared_from_this<PublishedWait> {
 public:
  PublishedWait(Admin& admin, std::string id, std::string key,
                std::chrono::steady_clock::time_point deadline, HttpResponse::Reply reply,
                HttpResponse::Post post)
      : admin_(admin),
        id_(std::move(id)),
        key_(std::move(key)),
        deadline_(deadline),
        reply_(std::move(reply)),
        post_(std::move(post)) {}

  // On a handler thread. Whatever fails is answered, as a handler's exception would be.
  void read() {
    try {
      read_once();
    } catch (const std::exception& e) {
      reply_(json_error(500, "internal", e.what()));
    } catch (...) {
      reply_(json_error(500, "internal", "the wait failed"));
    }
  }

 private:
  void read_once() {
    const HttpResponse response = guarded_route([&] {
      detail::ChangeWatch& watch = admin_.changes();
      const detail::ChangeWatch::Mark mark = watch.mark();
      const Admin::PublishedNow now = admin_.published_now(id_, key_);
      if (now.value || now.ended || admin_.env().steady_now() >= deadline_) {
        return answer(now.value);
      }
      // The callback runs on a committing or the watch's thread: the next read goes elsewhere.
      watch.async_wait(id_, key_, mark, deadline_, [self = shared_from_this()](bool) {
        self->post_([self] { self->read(); });
      });
      HttpResponse waiting;
      waiting.status = 0;  // no answer yet
      return waiting;
    });
    if (response.status != 0) reply_(response);
  }

  Admin& admin_;
  std::string id_, key_;
  std::chrono::steady_clock::time_point deadline_;
  HttpResponse::Reply reply_;
  HttpResponse::Post post_;
};

}  // namespace

HttpResponse published_route(Admin& admin, const HttpRequest& request, const std::string& id,
                             std::optional<std::string_view> key) {
  if (!key) return json_response(200, admin.published(id));
  const std::chrono::milliseconds wait = wait_of(request);
  const Admin::PublishedNow now = admin.published_now(id, *key);  // 404, 400 answered at once
  if (now.value || now.ended || wait.count() == 0) return answer(now.value);
  HttpResponse later;
  const auto deadline = admin.changes().deadline_after(wait);
  later.later = [&admin, id, key = std::string(*key), deadline](HttpResponse::Reply reply,
                                                                HttpResponse::Post post) {
    std::make_shared<PublishedWait>(admin, id, key, deadline, std::move(reply), std::move(post))
        ->read();
  };
  return later;
}

}  // namespace durable::ops
