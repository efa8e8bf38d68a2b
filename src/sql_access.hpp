// SPDX-License-Identifier: Apache-2.0
#pragma once
// Makes and ends the durable::Sql a transaction body is given (private to durable).

#include <durable/sql.hpp>
#include <memory>
#include <string>

namespace durable::detail {

struct SqlAccess {
  static std::unique_ptr<Sql> make(SqlSession& session, std::string step) {
    return std::unique_ptr<Sql>(new Sql(session, std::move(step)));
  }
  /// The body's call ended: the Sql refuses every call from now on.
  static void end(Sql& sql) { sql.session_ = nullptr; }
};

}  // namespace durable::detail
