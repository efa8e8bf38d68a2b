// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the tests of TLS and signed requests share: a self-signed certificate made with
// OpenSSL's API (no openssl command, no file in the tree), a blocking HTTPS client that checks
// the server's certificate against it, and the signature a machine client computes, written
// from docs/operations.md rather than from the server's code.

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace durable::test::tls {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct Certificate {
  std::string cert_file;  // PEM certificate, for --tls-cert and for the client to trust
  std::string key_file;   // PEM private key, for --tls-key
};

// A self-signed certificate for 127.0.0.1 and localhost (P-256, valid for a day), written as
// <dir>/<name>.crt and <dir>/<name>.key.
inline Certificate make_self_signed(const std::filesystem::path& dir, const std::string& name) {
  const auto fail = [](const char* what) {
    throw std::runtime_error(std::string("OpenSSL: ") + what);
  };
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (!key) fail("EVP_EC_gen");
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  if (!cert) fail("X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, cert.get(), cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
                                   std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
    if (extension == nullptr) fail("X509V3_EXT_conf_nid");
    X509_add_ext(cert.get(), extension, -1);
    X509_EXTENSION_free(extension);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) fail("X509_sign");
  Certificate out{(dir / (name + ".crt")).string(), (dir / (name + ".key")).string()};
  std::unique_ptr<FILE, decltype(&std::fclose)> cert_out(std::fopen(out.cert_file.c_str(), "w"),
                                                         std::fclose);
  std::unique_ptr<FILE, decltype(&std::fclose)> key_out(std::fopen(out.key_file.c_str(), "w"),
                                                        std::fclose);
  if (!cert_out || !key_out) fail("cannot write the certificate files");
  if (PEM_write_X509(cert_out.get(), cert.get()) != 1) fail("PEM_write_X509");
  if (PEM_write_PrivateKey(key_out.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    fail("PEM_write_PrivateKey");
  }
  return out;
}

using Response = http::response<http::string_body>;

// An HTTPS connection to 127.0.0.1:port that trusts only `trusted` (a PEM certificate file) and
// checks that it names 127.0.0.1. Throws boost::system::system_error when the handshake fails.
class Client {
 public:
  Client(unsigned short port, const std::string& trusted)
      : context_(asio::ssl::context::tls_client), stream_(io_, context_) {
    context_.load_verify_file(trusted);
    stream_.set_verify_mode(asio::ssl::verify_peer);
    stream_.set_verify_callback(asio::ssl::host_name_verification("127.0.0.1"));
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(10));
    beast::get_lowest_layer(stream_).connect(
        asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port));
    stream_.handshake(asio::ssl::stream_base::client);
  }

  Response exchange(http::verb method, std::string_view target, std::string body = {},
                    const std::string& authorization = {}, const std::string& origin = {}) {
    http::request<http::string_body> request(method,
                                             beast::string_view(target.data(), target.size()), 11);
    request.set(http::field::host, "127.0.0.1");
    if (!authorization.empty()) request.set(http::field::authorization, authorization);
    if (!origin.empty()) request.set(http::field::origin, origin);
    request.body() = std::move(body);
    request.prepare_payload();
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(10));
    http::write(stream_, request);
    Response response;
    http::read(stream_, buffer_, response);
    return response;
  }

 private:
  asio::io_context io_;
  asio::ssl::context context_;
  beast::ssl_stream<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
};

// What a machine client sends: HMAC-SHA256 under `secret` of method, target, t and nonce, one
// per line, then the body, as docs/operations.md ("Signed requests") says.
inline std::string signature_header(std::string_view secret, std::string_view method,
                                    std::string_view target, std::int64_t t, std::string_view nonce,
                                    std::string_view body) {
  std::string text = std::string(method) + "\n" + std::string(target) + "\n" + std::to_string(t) +
                     "\n" + std::string(nonce) + "\n" + std::string(body);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest, &length);
  std::string hex;
  char pair[3];
  for (unsigned int i = 0; i < length; ++i) {
    std::snprintf(pair, sizeof pair, "%02x", digest[i]);
    hex += pair;
  }
  return "Durable-Signature t=" + std::to_string(t) + ", nonce=" + std::string(nonce) +
         ", sig=" + hex;
}

inline std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace durable::test::tls
