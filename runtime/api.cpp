// SPDX-License-Identifier: Apache-2.0
#include "api.hpp"

#include <charconv>
#include <climits>
#include <optional>
#include <string>
#include <string_view>

#include "bulk.hpp"
#include "durations.hpp"
#include "ids.hpp"
#include "serialization.hpp"

namespace durable::ops {

HttpResponse json_response(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return response;
}

HttpResponse guarded_route(const std::function<HttpResponse()>& route) {
  try {
    return route();
  } catch (const BadRequest& e) {
    return json_error(400, "bad_request", e.what(), e.code());
  } catch (const NotFound& e) {
    return json_error(404, "not_found", e.what(), e.code());
  } catch (const UnknownWorkflow& e) {
    return json_error(422, "unknown_workflow", e.what(), e.code());
  } catch (const Conflict& e) {
    return json_error(409, "conflict", e.what(), e.code());
  } catch (const Error& e) {
    // The database: busy, full, unreadable.
    return json_error(503, "unavailable", e.what(), e.code());
  }
}

namespace {

// The action of POST /v1/runs/{id}/messages/{topic}, before its topic.
constexpr std::string_view kMessages = "messages/";

bool empty_body(const HttpRequest& request) {
  return request.body.find_first_not_of(" \t\r\n") == std::string::npos;
}

// The body as any JSON value, nesting at most `levels` deep.
json parsed_body(const HttpRequest& request, std::size_t levels) {
  if (detail::too_deep_text(request.body, levels)) {
    throw BadRequest(
        "the request body is refused: the values it carries (an input, an event's "
        "data) may nest arrays and objects at most " +
        std::to_string(detail::kMaxJsonDepth) +
        " levels deep, so that a hostile value cannot exhaust a stack");
  }
  json body;
  try {
    body = json::parse(request.body);
  } catch (const json::exception& e) {
    // Not only parse errors: a number out of range (1e999) is out_of_range.406. Either way the
    // client sent it, so 400; 500 stays for bugs.
    throw BadRequest(std::string("the request body is not valid JSON: ") + e.what());
  }
  return body;
}

// The JSON object of a request body; an empty body is an empty object.
json object_body(const HttpRequest& request) {
  if (empty_body(request)) return json::object();
  // The body's object adds one level to the values it carries.
  json body = parsed_body(request, detail::kMaxJsonDepth + 1);
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
  return body;
}

std::string string_field(const json& body, const char* name, bool required) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) {
    if (required) throw BadRequest(std::string("the request body needs \"") + name + "\"");
    return {};
  }
  if (!it->is_string()) throw BadRequest(std::string("\"") + name + "\" must be a string");
  return it->get<std::string>();
}

Clock::time_point time_of(const char* name, const std::string& text) {
  const std::optional<Clock::time_point> at = detail::parse_utc_time(text);
  if (!at) {
    throw BadRequest(std::string(name) + " must be a UTC time (2026-11-27T18:00:00Z) before " +
                     "2262, not '" + text + "'");
  }
  return *at;
}

RunQuery run_query(const HttpRequest& request) {
  RunQuery query;
  if (const auto it = request.query.find("status");
      it != request.query.end() && !it->second.empty()) {
    query.status = status_from_string(it->second);
    if (!query.status) {
      throw BadRequest("unknown status '" + it->second +
                       "': pending, running, sleeping, waiting, paused, completed, failed or "
                       "cancelled");
    }
  }
  // tag.KEY=VALUE: runs that have the tag.
  constexpr std::string_view kTag = "tag.";
  for (const auto& [name, value] : request.query) {
    if (!name.starts_with(kTag)) continue;
    if (name.size() == kTag.size() || value.empty()) {
      throw BadRequest("a tag filter is tag.KEY=VALUE, with a key and a value: not '" + name + "=" +
                       value + "'");
    }
    query.tags[name.substr(kTag.size())] = value;
  }
  if (const auto it = request.query.find("workflow"); it != request.query.end()) {
    query.workflow = it->second;
  }
  if (const auto it = request.query.find("correlation_id"); it != request.query.end()) {
    query.correlation_id = it->second;
  }
  if (const auto it = request.query.find("failed_step"); it != request.query.end()) {
    query.failed_step = it->second;
  }
  if (const auto it = request.query.find("error_type"); it != request.query.end()) {
    query.error_type = it->second;
  }
  for (const char* name : {"created_after", "created_before"}) {
    if (const auto it = request.query.find(name); it != request.query.end()) {
      (std::string_view(name) == "created_after" ? query.created_after : query.created_before) =
          time_of(name, it->second);
    }
  }
  if (const auto it = request.query.find("cursor"); it != request.query.end()) {
    if (!detail::parse_run_cursor(it->second)) {
      throw BadRequest("cursor must be the next_cursor of a list of runs, not '" + it->second +
                       "'");
    }
    query.cursor = it->second;
  }
  if (const auto it = request.query.find("limit"); it != request.query.end()) {
    std::size_t limit = 0;
    const auto [end, error] =
        std::from_chars(it->second.data(), it->second.data() + it->second.size(), limit);
    if (error != std::errc() || end != it->second.data() + it->second.size() || limit == 0 ||
        limit > 1000) {
      throw BadRequest("limit must be a number from 1 to 1000, not '" + it->second + "'");
    }
    query.limit = limit;
  }
  return query;
}

HttpResponse method_not_allowed(const char* allowed) {
  HttpResponse response = json_error(405, "method_not_allowed", std::string("use ") + allowed);
  response.headers.emplace_back("Allow", allowed);
  return response;
}

HttpResponse runs_route(Admin& admin, const HttpRequest& request) {
  if (request.method == "GET") return json_response(200, admin.list(run_query(request)));
  if (request.method != "POST") return method_not_allowed("GET, POST");
  const json body = object_body(request);
  StartRequest start;
  start.workflow = string_field(body, "workflow", true);
  start.input = body.value("input", json::object());
  start.idempotency_key = string_field(body, "idempotency_key", false);
  start.correlation_id = string_field(body, "correlation_id", false);
  start.deadline = string_field(body, "deadline", false);
  start.traceparent = request.traceparent;
  if (const auto it = body.find("priority"); it != body.end() && !it->is_null()) {
    // Out of int's range here; out of the runs' range in new_run(), with its message.
    if (!it->is_number_integer() || *it < json(INT_MIN) || *it > json(INT_MAX)) {
      throw BadRequest("\"priority\" must be a whole number");
    }
    start.priority = it->get<int>();
  }
  if (const auto it = body.find("tags"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw BadRequest("\"tags\" must be an object of strings");
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string()) {
        throw BadRequest("\"tags\" must be an object of strings: \"" + key + "\" is not");
      }
      start.tags[key] = value.get<std::string>();
    }
  }
  const json started = admin.start(start);
  return json_response(started.at("created").get<bool>() ? 201 : 200, started);
}

// POST /v1/runs/cancel, /v1/runs/retry, /v1/runs/purge: a bulk action over a filter (the body's
// fields, as GET /v1/runs takes them), or its count with "dry_run".
HttpResponse bulk_route(Admin& admin, const HttpRequest& request, detail::BulkAction action) {
  const json body = object_body(request);
  HttpRequest as_query;
  for (const char* name : {"status", "workflow", "correlation_id", "failed_step", "error_type",
                           "created_after", "created_before"}) {
    const std::string value = string_field(body, name, false);
    if (!value.empty()) as_query.query[name] = value;
  }
  if (const auto it = body.find("tags"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw BadRequest("\"tags\" must be an object of strings");
    for (const auto& [key, value] : it->items()) {
      if (!value.is_string() || key.empty() || value.get<std::string>().empty()) {
        throw BadRequest("\"tags\" must be an object of non-empty strings");
      }
      as_query.query["tag." + key] = value.get<std::string>();
    }
  }
  const RunQuery query = run_query(as_query);
  const auto flag = [&](const char* name) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) return false;
    if (!it->is_boolean()) throw BadRequest(std::string("\"") + name + "\" must be true or false");
    return it->get<bool>();
  };
  if (!query.any_condition() && !flag("all")) {
    throw BadRequest(std::string("a bulk ") + detail::to_string(action) +
                     " needs a filter (status, workflow, correlation_id, failed_step, "
                     "error_type, tags, created_after, created_before), or \"all\": true");
  }
  return json_response(
      200, admin.bulk(action, query, flag("dry_run"), string_field(body, "reason", false)));
}

// POST /v1/runs/{id}/messages/{topic}: the body is the message.
HttpResponse message_route(Admin& admin, const HttpRequest& request, const std::string& id,
                           std::string_view topic) {
  if (request.method != "POST") return method_not_allowed("POST");
  if (empty_body(request)) throw BadRequest("the request body must be the message, as JSON");
  return json_response(202, admin.send(id, topic, parsed_body(request, detail::kMaxJsonDepth)));
}

// /v1/runs/{id}, /v1/runs/{id}/steps, /v1/runs/{id}/published[/{key}], /v1/runs/{id}/streams[/
// {name}], and POST /v1/runs/{id}/cancel, retry, pause, resume, fork, resolve, messages/{topic}
HttpResponse run_route(Admin& admin, const HttpRequest& request, std::string_view rest) {
  const std::size_t slash = rest.find('/');
  const std::string id(rest.substr(0, slash));
  const std::string_view action = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  if (id.empty()) return json_error(404, "not_found", "no route " + request.path);
  // Run ids are hexadecimal: these names are the bulk actions'.
  for (const auto bulk :
       {detail::BulkAction::cancel, detail::BulkAction::retry, detail::BulkAction::purge}) {
    if (action.empty() && id == detail::to_string(bulk)) {
      if (request.method != "POST") return method_not_allowed("POST");
      return bulk_route(admin, request, bulk);
    }
  }
  if (action.empty()) {
    if (request.method != "GET") return method_not_allowed("GET");
    return json_response(200, admin.show(id));
  }
  if (action.starts_with(kMessages)) {
    return message_route(admin, request, id, action.substr(kMessages.size()));
  }
  if (action == "steps") {
    if (request.method != "GET") return method_not_allowed("GET");
    return json_response(200, admin.steps(id));
  }
  if (action == "published" || action.starts_with("published/")) {
    if (request.method != "GET") return method_not_allowed("GET");
    std::optional<std::string_view> key;  // none: the list
    if (action != "published") key = action.substr(std::string_view("published/").size());
    return published_route(admin, request, id, key);
  }
  if (action == "streams" || action.starts_with("streams/")) {
    if (request.method != "GET") return method_not_allowed("GET");
    std::optional<std::string_view> name;  // none: the list
    if (action != "streams") name = action.substr(std::string_view("streams/").size());
    return streams_route(admin, request, id, name);
  }
  if (action == "cancel" || action == "retry" || action == "pause" || action == "resume" ||
      action == "fork" || action == "resolve") {
    if (request.method != "POST") return method_not_allowed("POST");
    if (action == "retry") return json_response(200, admin.retry(id));
    if (action == "pause") return json_response(200, admin.pause(id));
    if (action == "resume") return json_response(200, admin.resume(id));
    const json body = object_body(request);
    if (action == "fork") {
      return json_response(201, admin.fork(id, string_field(body, "from_step", true)));
    }
    if (action == "resolve") {
      if (!body.contains("output")) {
        throw BadRequest("the body needs \"output\": the step's result, as JSON");
      }
      return json_response(200,
                           admin.resolve(id, string_field(body, "step", true), body.at("output"),
                                         string_field(body, "reason", false)));
    }
    return json_response(200, admin.cancel(id, string_field(body, "reason", false)));
  }
  return json_error(404, "not_found", "no route " + request.path);
}

// POST /v1/workflows/{name}/pause and /resume
HttpResponse workflow_route(Admin& admin, const HttpRequest& request, std::string_view rest) {
  const std::size_t slash = rest.rfind('/');
  const std::string_view action = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  if (slash == 0 || (action != "pause" && action != "resume")) {
    return json_error(404, "not_found", "no route " + request.path);
  }
  if (request.method != "POST") return method_not_allowed("POST");
  const std::string_view name = rest.substr(0, slash);
  return json_response(
      200, action == "pause" ? admin.pause_workflow(name) : admin.resume_workflow(name));
}

HttpResponse dashboard_response() {
  HttpResponse page;
  page.content_type = "text/html; charset=utf-8";
  page.body = std::string(dashboard_page());
  page.headers.emplace_back("Cache-Control", "no-store");
  return page;
}

HttpResponse dispatch(Admin& admin, const HttpRequest& request) {
  const std::string_view path = request.path;
  constexpr std::string_view kRun = "/v1/runs/", kSchedule = "/v1/schedules/",
                             kWorkflow = "/v1/workflows/";
  if (path == "/") {
    if (request.method != "GET") return method_not_allowed("GET");
    return dashboard_response();
  }
  if (path == "/metrics") {
    if (request.method != "GET") return method_not_allowed("GET");
    HttpResponse metrics;
    metrics.content_type = "text/plain; version=0.0.4; charset=utf-8";
    metrics.body = admin.metrics();
    return metrics;
  }
  if (path == "/v1/runs") return runs_route(admin, request);
  if (path.starts_with(kRun)) return run_route(admin, request, path.substr(kRun.size()));
  if (path.starts_with(kWorkflow)) {
    return workflow_route(admin, request, path.substr(kWorkflow.size()));
  }
  if (path == "/v1/events") {
    if (request.method != "POST") return method_not_allowed("POST");
    const json body = object_body(request);
    const std::string name = string_field(body, "name", true);
    return json_response(
        202, admin.send_event(name, body.value("data", json::object()), request.traceparent));
  }
  if (path == "/v1/stats") {
    if (request.method != "GET") return method_not_allowed("GET");
    return json_response(200, admin.stats());
  }
  if (path == "/v1/schedules") {
    if (request.method != "GET") return method_not_allowed("GET");
    return json_response(200, admin.schedules());
  }
  if (path.starts_with(kSchedule) && path.size() > kSchedule.size()) {
    if (request.method != "DELETE") return method_not_allowed("DELETE");
    const std::string id(path.substr(kSchedule.size()));
    admin.unschedule(id);
    return json_response(200, {{"id", id}, {"removed", true}});
  }
  return json_error(404, "not_found", "no route " + request.path);
}

}  // namespace

HttpHandler api_handler(Admin& admin) {
  return [&admin](const HttpRequest& request) -> HttpResponse {
    return guarded_route([&] { return dispatch(admin, request); });
  };
}

std::map<std::string, HttpResponse> static_pages() { return {{"/", dashboard_response()}}; }

}  // namespace durable::ops
