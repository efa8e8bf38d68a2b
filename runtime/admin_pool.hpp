// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Admin's pooled connections (runtime/admin.cpp), for the files that implement its calls.

#include <memory>

#include "admin.hpp"
#include "ops_queries.hpp"
#include "store.hpp"

namespace durable::ops {

/// Every status, in the order answers list them.
inline constexpr Status kStatuses[] = {Status::pending, Status::running,  Status::sleeping,
                                       Status::waiting, Status::paused,   Status::completed,
                                       Status::failed,  Status::cancelled};

struct Admin::Connection {
  std::unique_ptr<detail::Store> store;
  std::unique_ptr<detail::OpsQueries> queries;
};

/// A connection taken from the pool for one call, given back when the Lease ends.
class Admin::Lease {
 public:
  Lease(Admin& admin, std::unique_ptr<Connection> connection)
      : admin_(admin), connection_(std::move(connection)) {}
  ~Lease() { admin_.give_back(std::move(connection_)); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Connection& operator*() const { return *connection_; }
  Connection* operator->() const { return connection_.get(); }

 private:
  Admin& admin_;
  std::unique_ptr<Connection> connection_;
};

}  // namespace durable::ops
