// SPDX-License-Identifier: Apache-2.0
// The store's parts wired together (store/parts.hpp); its connection is made again through the
// subclass's reconnect().

#include "store/sql_store.hpp"

namespace durable::detail {

SqlStore::SqlStore(std::unique_ptr<sql::Connection> db, std::string name)
    : tables_(std::move(db), std::move(name), [this] { return reconnect(); }) {}

std::unique_ptr<sql::Connection> SqlStore::reconnect() {
  fail("the connection broke and cannot be made again");
}

}  // namespace durable::detail
