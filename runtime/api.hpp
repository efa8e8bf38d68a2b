// SPDX-License-Identifier: Apache-2.0
#pragma once
// The HTTP admin API (/v1/..., /metrics) and the dashboard page at /, on an Admin: the routes
// docs/operations.md lists, each answering JSON, every error in json_error's shape.

#include <map>
#include <string>
#include <string_view>

#include "admin.hpp"
#include "http_server.hpp"

namespace durable::ops {

/// The handler of every route, on `admin` (which must outlive it). Safe to call concurrently.
HttpHandler api_handler(Admin& admin);

/// The dashboard: one HTML page with its script, built into the binary.
std::string_view dashboard_page();

/// The pages that hold no data, for HttpOptions::static_responses: the dashboard at "/". The
/// handler answers them too; given to the server, they load even while every handler waits.
std::map<std::string, HttpResponse> static_pages();

}  // namespace durable::ops
