// SPDX-License-Identifier: Apache-2.0
#pragma once
// The HTTP admin API (/v1/..., /metrics) and the dashboard page at /, on an Admin: the routes
// docs/operations.md lists, each answering JSON, every error in json_error's shape.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "admin.hpp"
#include "http_server.hpp"

namespace durable::ops {

/// The handler of every route, on `admin` (which must outlive it). Safe to call concurrently.
HttpHandler api_handler(Admin& admin);

/// `route`'s response, or the error response of what it threw (400 BadRequest, 404 NotFound,
/// 422 UnknownWorkflow, 409 Conflict, 503 any other Error), as every route answers errors.
HttpResponse guarded_route(const std::function<HttpResponse()>& route);

/// A JSON response with this status.
HttpResponse json_response(int status, const json& body);

/// GET /v1/runs/{id}/published (the run's values) and /v1/runs/{id}/published/{key}?wait_ms=N
/// (`key` none: the list), in runtime/published_route.cpp. A wait holds no thread: the response
/// comes later (HttpResponse::later), when the value is published or the wait ends.
HttpResponse published_route(Admin& admin, const HttpRequest& request, const std::string& id,
                             std::optional<std::string_view> key);

/// GET /v1/runs/{id}/streams (the run's streams) and /v1/runs/{id}/streams/{name} (`name`
/// given): Server-Sent Events, in runtime/stream_route.cpp. An idle reader holds no thread and
/// no database connection (HttpResponse::stream).
HttpResponse streams_route(Admin& admin, const HttpRequest& request, const std::string& id,
                           std::optional<std::string_view> name);

/// The dashboard: one HTML page with its script, built into the binary.
std::string_view dashboard_page();

/// The pages that hold no data, for HttpOptions::static_responses: the dashboard at "/". The
/// handler answers them too; given to the server, they load even while every handler waits.
std::map<std::string, HttpResponse> static_pages();

}  // namespace durable::ops
