// SPDX-License-Identifier: Apache-2.0
// GET /v1/runs/{id}/streams (the run's streams) and GET /v1/runs/{id}/streams/{name}: a stream
// as Server-Sent Events (docs/http-api.md). Each value is one event, `id:` its offset and
// `data:` its JSON on one line; `Last-Event-ID: N` (or `?from=N+1`) resumes after N; a comment
// line every 15 s (Admin::stream_keep_alive) keeps an idle stream's connection open, and tells
// a reader whose client has gone (the write fails); the response ends at the close.
//
// An idle reader holds no thread and no database connection: it is an async wait on the
// Admin's ChangeWatch, whose callback posts the next read to a handler thread; the read leases a
// connection for its query only. The read comes after a mark of the watch, so a value written
// between the two wakes the wait at once.

#include <charconv>
#include <limits>
#include <memory>

#include "api.hpp"
#include "change_watch.hpp"

namespace durable::ops {

namespace {

std::size_t number(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    throw BadRequest(what + " must be a whole number, not '" + text + "'");
  }
  return n;
}

// Where a reader starts: after Last-Event-ID, else at ?from, else at 0.
std::size_t first_offset(const HttpRequest& request) {
  if (!request.last_event_id.empty()) {
    const std::size_t last = number(request.last_event_id, "Last-Event-ID");
    if (last == std::numeric_limits<std::size_t>::max()) {
      throw BadRequest("Last-Event-ID is past any offset a stream can have");
    }
    return last + 1;
  }
  const auto from = request.query.find("from");
  return from == request.query.end() ? 0 : number(from->second, "from");
}

// One reader of a stream: reads, writes what it read, and waits again, until the close.
class StreamReader : public std::enable_shared_from_this<StreamReader> {
 public:
  StreamReader(Admin& admin, std::string id, std::string name, std::size_t next,
               HttpResponse::Chunks chunks)
      : admin_(admin),
        id_(std::move(id)),
        name_(std::move(name)),
        next_(next),
        chunks_(std::move(chunks)) {}

  // On a handler thread. Whatever fails ends the response: the reader reconnects.
  void read() {
    try {
      read_once();
    } catch (...) {
      chunks_.end();
    }
  }

 private:
  void read_once() {
    detail::ChangeWatch& watch = admin_.changes();
    const detail::ChangeWatch::Mark mark = watch.mark();
    StreamRead now;
    now = admin_.stream_now(id_, name_, next_);  // throws when the run was purged, or the
                                                 // database failed
    std::string events;
    for (std::size_t i = 0; i < now.values.size(); ++i) {
      events += "id: " + std::to_string(next_ + i) + "\ndata: " + now.values[i].dump() + "\n\n";
    }
    next_ = now.next;
    const bool closed = now.closed;
    if (!events.empty()) return write(std::move(events), closed);
    if (closed) return chunks_.end();
    if (admin_.env().steady_now() >= quiet_until_) return write(": keep-alive\n\n", false);
    // The callback runs on a committing or the watch's thread: the next read goes elsewhere.
    watch.async_wait(id_, name_, mark, quiet_until_, [self = shared_from_this()](bool) {
      self->chunks_.post([self] { self->read(); });
    });
  }

  // Then reads again, or ends after the close.
  void write(std::string data, bool last) {
    quiet_until_ = admin_.env().steady_now() + admin_.stream_keep_alive();
    chunks_.write(std::move(data), [self = shared_from_this(), last](bool sent) {
      if (!sent || last) return self->chunks_.end();
      self->chunks_.post([self] { self->read(); });
    });
  }

  Admin& admin_;
  std::string id_, name_;
  std::size_t next_;
  HttpResponse::Chunks chunks_;
  // When the idle connection gets its next comment line: a keep-alive after the last write.
  std::chrono::steady_clock::time_point quiet_until_ =
      admin_.env().steady_now() + admin_.stream_keep_alive();
};

}  // namespace

HttpResponse streams_route(Admin& admin, const HttpRequest& request, const std::string& id,
                           std::optional<std::string_view> name) {
  if (!name) return json_response(200, admin.streams(id));
  const std::size_t from = first_offset(request);
  admin.stream_now(id, *name, from);  // 404 and 400 answered before the stream begins
  HttpResponse events;
  events.content_type = "text/event-stream";
  events.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  events.stream = [&admin, id, name = std::string(*name), from](HttpResponse::Chunks chunks) {
    std::make_shared<StreamReader>(admin, id, name, from, std::move(chunks))->read();
  };
  return events;
}

}  // namespace durable::ops
