// SPDX-License-Identifier: Apache-2.0

#include "http_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace progress {

namespace {

// The body of a chunked answer: each chunk is its size in hex, CRLF, the bytes, CRLF.
std::string dechunk(std::string_view chunked) {
  std::string body;
  while (!chunked.empty()) {
    const std::size_t eol = chunked.find("\r\n");
    if (eol == std::string_view::npos) break;
    const std::size_t size = std::strtoul(std::string(chunked.substr(0, eol)).c_str(), nullptr, 16);
    if (size == 0 || eol + 2 + size > chunked.size()) break;
    body.append(chunked.substr(eol + 2, size));
    chunked.remove_prefix(std::min(chunked.size(), eol + 2 + size + 2));
  }
  return body;
}

}  // namespace

HttpAnswer http_request(unsigned short port, std::string_view method, std::string_view path,
                        std::string_view body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {};
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    std::string request = std::string(method) + " " + std::string(path) +
                          " HTTP/1.1\r\nHost: " + "127.0.0.1:" + std::to_string(port) +
                          "\r\nConnection: close\r\n";
    if (!body.empty()) {
      request +=
          "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\n";
    }
    request += "\r\n" + std::string(body);
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[16 * 1024];
      for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) {
        raw.append(buffer, static_cast<std::size_t>(n));
      }
    }
  }
  ::close(fd);
  const std::size_t head_end = raw.find("\r\n\r\n");
  if (!raw.starts_with("HTTP/1.1 ") || head_end == std::string::npos) return {};
  HttpAnswer answer;
  answer.status = std::atoi(raw.c_str() + 9);
  std::string head = raw.substr(0, head_end);
  answer.body = raw.substr(head_end + 4);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    answer.body = dechunk(answer.body);
  }
  return answer;
}

}  // namespace progress
