// SPDX-License-Identifier: Apache-2.0
// The store's side of payloads at rest (src/payloads.hpp): every payload column is written
// through encoded() and read through payload(); the data keys live in the data_keys table, read
// and written in the caller's transaction; delete_data_key() destroys one (Runtime::forget, in
// interventions.cpp).

#include <string>

#include "env.hpp"
#include "errors_internal.hpp"
#include "serialization.hpp"
#include "store/tables.hpp"

namespace durable::detail {

// The data keys, in the transaction under way.
class SqlTables::Keys final : public PayloadKeys {
 public:
  explicit Keys(sql::Connection& db) : db_(&db) {}
  std::optional<WrappedKey> find_data_key(const std::string& owner) override {
    sql::Query q(*db_, "SELECT key_id, wrapped FROM data_keys WHERE owner = ?");
    q.bind(1, owner);
    if (!q.next()) return std::nullopt;
    return WrappedKey{q.text(0), q.text(1)};
  }
  WrappedKey put_data_key(const std::string& owner, const WrappedKey& key) override {
    {
      sql::Query insert(*db_,
                        "INSERT INTO data_keys (owner, key_id, wrapped, created_at) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (owner) DO NOTHING");
      insert.bind(1, owner);
      insert.bind(2, key.key_id);
      insert.bind(3, key.wrapped);
      insert.bind(4, Env::system().now_ms());
      insert.run();
    }
    const auto stored = find_data_key(owner);
    if (!stored) bug("the data key of '" + owner + "' was not stored");
    return *stored;
  }

 private:
  static std::int64_t to_ms(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  }
  sql::Connection* db_;
};

namespace {

// A payload's place with the correlation id filled in (the store knows it, its callers not
// always); `correlation` holds the text it points at.
PayloadAt resolved(PayloadAt at, std::string& correlation,
                   const std::function<std::string(std::string_view)>& lookup) {
  if (at.correlation_id.empty() && at.of_run) {
    correlation = lookup(at.run_id);
    at.correlation_id = correlation;
  }
  return at;
}

}  // namespace

std::string SqlTables::encoded(const PayloadAt& at, std::string_view text) {
  if (!payloads_) return std::string(text);
  std::string correlation;
  Keys keys(db());
  return payloads_->encode(resolved(at, correlation, [&](auto id) { return correlation_of(id); }),
                           text, keys);
}

std::string SqlTables::payload_text(const PayloadAt& at, const std::string& stored_text) {
  if (!payloads_) {
    const std::string_view named = stored_codec(stored_text);
    if (named == kNoCodec) return stored_text;
    static const Payloads none(std::nullopt, "");
    Keys keys(db());
    return none.decode(at, stored_text, keys);  // throws, naming both
  }
  std::string correlation;
  Keys keys(db());
  std::string text = payloads_->decode(
      resolved(at, correlation, [&](auto id) { return correlation_of(id); }), stored_text, keys);
  // A placeholder, not the value: a run holding one is not executed, nor forked (see stored()).
  if (text == kForgotten) unreadable_ = "its payloads were forgotten (Runtime::forget)";
  return text;
}

json SqlTables::payload(const PayloadAt& at, const std::string& stored_text) {
  if (!payloads_ && stored_codec(stored_text) == kNoCodec) return stored(stored_text);
  return stored(payload_text(at, stored_text));
}

std::string SqlTables::correlation_of(std::string_view run_id) {
  if (const auto it = correlations_.find(run_id); it != correlations_.end()) return it->second;
  sql::Query q(db(), "SELECT correlation_id FROM runs WHERE id = ?");
  q.bind(1, std::string(run_id));
  std::string correlation = q.next() && !q.is_null(0) ? q.text(0) : std::string();
  if (correlations_.size() >= 4096) correlations_.clear();  // a cache, not a copy of the table
  correlations_.emplace(std::string(run_id), correlation);
  return correlation;
}

// An error's message is any text (it may begin with '~'), so an encoded one says so: "encoded".
std::string SqlTables::error_stored(const PayloadAt& at, const ErrorInfo& error) {
  json j = error_to_json(error);
  if (payloads_) {
    j["message"] = encoded(at, lenient_dump(json(error.message)));
    j["encoded"] = true;
  }
  return lenient_dump(j);
}

ErrorInfo SqlTables::error_read(const PayloadAt& at, const std::string& stored_text) {
  const json j = stored(stored_text);
  ErrorInfo error = error_from_json(j);
  if (!j.is_object() || !j.value("encoded", false) || !j["message"].is_string()) return error;
  const json message = payload(at, error.message);  // throws for a codec this process lacks
  error.message = message.is_string() ? message.get<std::string>() : lenient_dump(message);
  return error;
}

void SqlTables::delete_data_key(const std::string& owner) {
  const sql::Dialect& d = db().dialect();
  if (!d.secure_delete_on.empty()) db().execute(std::string(d.secure_delete_on));
  sql::Query remove(db(), "DELETE FROM data_keys WHERE owner = ?");
  remove.bind(1, owner);
  remove.run();
  if (!d.secure_delete_off.empty()) db().execute(std::string(d.secure_delete_off));
}

}  // namespace durable::detail
