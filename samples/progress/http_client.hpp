// SPDX-License-Identifier: Apache-2.0
// One HTTP/1.1 request to 127.0.0.1, answered in full: what --once uses to do what the page does.
#pragma once

#include <string>
#include <string_view>

namespace progress {

struct HttpAnswer {
  int status = 0;    ///< 0 when there was no answer
  std::string body;  ///< de-chunked
};

/// Sends the request (with "Connection: close") and reads the answer until the server closes
/// the connection: a Server-Sent Events answer until the stream's close.
HttpAnswer http_request(unsigned short port, std::string_view method, std::string_view path,
                        std::string_view body = {});

}  // namespace progress
