// SPDX-License-Identifier: Apache-2.0
// What a run makes known of itself, written in the transaction that journals it, so that the
// journal and what it made known never disagree and a replay, which writes no new entry, writes
// nothing again.
//
// Published values (Step::publish): the latest value per (run, key). Each write moves the row's
// version on by one: a reader can tell a new write of the same value. Where change feeds listen
// (PostgreSQL), the write also sends "RUN_ID/KEY" on their channel, delivered at commit.
//
// Tags (Step::set_tags): merged into the run's, in runs.tags (what RunInfo shows) and run_tags
// (what RunFilter::tags finds).

#include "change_watch.hpp"
#include "store/parts.hpp"

namespace durable::detail {

void RunOutputs::write_published(const std::string& run_id, const JournalEntry& entry,
                                 std::int64_t now_ms) {
  const std::string key = entry.output.value("key", "");
  sql::Query upsert(t_.db(),
                    "INSERT INTO published (run_id, key, value, version, updated_at) "
                    "VALUES (?1, ?2, ?3, 1, ?4) ON CONFLICT (run_id, key) DO UPDATE SET "
                    "value = excluded.value, version = published.version + 1, "
                    "updated_at = excluded.updated_at");
  upsert.bind(1, run_id);
  upsert.bind(2, key);
  const std::string slot = published_slot(key);
  upsert.bind(3, t_.encoded({run_id, "", slot}, entry.output.value("value", json()).dump()));
  upsert.bind(4, now_ms);
  upsert.run();
  t_.announce_change(run_id, key);
}

void RunOutputs::merge_tags(const std::string& run_id, const JournalEntry& entry) {
  for (const auto& [key, value] : entry.output.items()) {
    sql::Query upsert(t_.db(),
                      "INSERT INTO run_tags (run_id, key, value) VALUES (?, ?, ?) "
                      "ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value");
    upsert.bind(1, run_id);
    upsert.bind(2, key);
    upsert.bind(3, value.get<std::string>());
    upsert.run();
  }
  // runs.tags from run_tags, the one source, so the two never disagree.
  std::map<std::string, std::string> tags;
  sql::Query all(t_.db(), "SELECT key, value FROM run_tags WHERE run_id = ?");
  all.bind(1, run_id);
  while (all.next()) tags[all.text(0)] = all.text(1);
  sql::Query write(t_.db(), "UPDATE runs SET tags = ? WHERE id = ?");
  write.bind(1, json(tags).dump());
  write.bind(2, run_id);
  write.run();
}

PublishedRead RunOutputs::published(const std::string& run_id,
                                    const std::optional<std::string>& key) {
  return t_.reading([&] {
    PublishedRead read;
    const std::optional<bool> ended = run_has_ended(run_id);
    if (!ended) return read;
    read.run_found = true;
    read.run_ended = *ended;
    if (key && !findable(*key)) return read;  // never written
    sql::Query values(t_.db(), std::string("SELECT key, value, version, updated_at FROM published "
                                           "WHERE run_id = ?") +
                                   (key ? " AND key = ?" : "") + " ORDER BY key");
    values.bind(1, run_id);
    if (key) values.bind(2, *key);
    while (values.next()) {
      const std::string key_read = values.text(0), slot = published_slot(key_read);
      read.values.push_back({key_read, t_.payload_text({run_id, "", slot}, values.text(1)),
                             values.int64(2), values.int64(3)});
    }
    return read;
  });
}

}  // namespace durable::detail
