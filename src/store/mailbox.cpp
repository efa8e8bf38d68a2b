// SPDX-License-Identifier: Apache-2.0
// A mailbox per run: Runtime::send stores a message for one run; step.receive takes the oldest
// one on its topic not yet received. Unlike an event, a message waits for its receive, however
// early it came.
//
// Exactly once, in order: a message is marked received (received_by: the receive's journal key)
// in the transaction that completes that receive with it, so a crash keeps both or neither, and
// replays read it from the journal. Two transactions meet a receive: the commit of its waiting
// entry looks in the mailbox (register_receive), and a send looks for a waiting receive of its
// topic. Both hold the run's row (the commit from its ownership check, the send from
// locked_status) until they end, so one of them sees the other's row: a message sent while a
// receive is being journaled is taken by one of the two, never left beside a waiting receive.
// The same row lock orders the sends to one run, so seq follows their commit order there.

#include "errors_internal.hpp"
#include "run_requests.hpp"
#include "store/parts.hpp"

namespace durable::detail {

Sent Waits::send_message(const NewMessage& m) {
  if (!findable(m.run_id)) return Sent::no_run;
  return t_.guarded([&] {
    sql::Transaction tx(t_.db());
    const std::optional<Status> status = t_.locked_status(m.run_id);
    if (!status) return Sent::no_run;
    if (ended(*status)) return Sent::ended;
    {
      sql::Query insert(t_.db(),
                        "INSERT INTO messages (run_id, topic, data, sent_at) VALUES (?, ?, ?, ?)");
      insert.bind(1, m.run_id);
      insert.bind(2, m.topic);
      const std::string slot = message_slot(m.topic);
      insert.bind(3, t_.encoded({m.run_id, "", slot}, m.data));
      insert.bind(4, m.now_ms);
      insert.run();
    }
    // The run waits on at most one receive at a time (a receive runs the started steps first),
    // but the journal is what it is: each waiting receive of the topic, oldest first.
    std::vector<std::string> keys;
    {
      sql::Query waiting(t_.db(),
                         "SELECT key, output FROM steps WHERE run_id = ? AND kind = 'receive' "
                         "AND state = 'waiting' ORDER BY seq");
      waiting.bind(1, m.run_id);
      while (waiting.next()) {
        const std::string slot = step_slot(waiting.text(0), "output");
        const json call = t_.payload({m.run_id, "", slot}, waiting.text(1));
        if (call.is_object() && call.value("topic", "") == m.topic) {
          keys.push_back(waiting.text(0));
        }
      }
    }
    Sent sent = Sent::kept;
    for (const std::string& key : keys) {
      if (!take_message(m.run_id, key, m.topic, m.now_ms)) break;
      wake(m.run_id, m.now_ms, "a message on '" + m.topic + "' came (" + key + ")");
      sent = Sent::delivered;
    }
    tx.commit();
    return sent;
  });
}

bool Waits::register_receive(const std::string& run_id, const JournalEntry& e,
                             std::int64_t now_ms) {
  return take_message(run_id, e.key, e.output.value("topic", ""), now_ms);
}

bool Waits::take_message(const std::string& run_id, const std::string& key,
                         const std::string& topic, std::int64_t now_ms) {
  std::int64_t seq = 0;
  json message;
  {
    sql::Query oldest(t_.db(),
                      "SELECT seq, data FROM messages WHERE run_id = ? AND topic = ? AND "
                      "received_by IS NULL ORDER BY seq LIMIT 1");
    oldest.bind(1, run_id);
    oldest.bind(2, topic);
    if (!oldest.next()) return false;
    seq = oldest.int64(0);
    const std::string slot = message_slot(topic);
    message = t_.payload({run_id, "", slot}, oldest.text(1));
  }
  const json received = {{"topic", topic}, {"message", std::move(message)}, {"seq", seq}};
  if (!complete_wait(run_id, key, received, now_ms)) return false;
  sql::Query mark(t_.db(), "UPDATE messages SET received_by = ? WHERE seq = ?");
  mark.bind(1, key);
  mark.bind(2, seq);
  mark.run();
  return true;
}

// Under the ended run's row lock (its final write holds it), so a send either came before and
// is carried, or comes after and finds the run ended. Each message is decoded and encoded again:
// a payload is bound to its run.
void Waits::carry_messages(const std::string& from, const std::string& to) {
  struct Kept {
    std::int64_t seq;
    std::string topic, data;
    std::int64_t sent_at;
  };
  std::vector<Kept> kept;
  {
    sql::Query q(t_.db(),
                 "SELECT seq, topic, data, sent_at FROM messages WHERE run_id = ? AND "
                 "received_by IS NULL ORDER BY seq");
    q.bind(1, from);
    while (q.next()) kept.push_back({q.int64(0), q.text(1), q.text(2), q.int64(3)});
  }
  for (const Kept& m : kept) {
    const std::string slot = message_slot(m.topic);
    const std::string text = t_.payload_text({from, "", slot}, m.data);
    sql::Query insert(t_.db(),
                      "INSERT INTO messages (run_id, topic, data, sent_at) VALUES (?, ?, ?, ?)");
    insert.bind(1, to);
    insert.bind(2, m.topic);
    insert.bind(3, t_.encoded({to, "", slot}, text));
    insert.bind(4, m.sent_at);
    insert.run();
    sql::Query remove(t_.db(), "DELETE FROM messages WHERE seq = ?");
    remove.bind(1, m.seq);
    remove.run();
  }
}

}  // namespace durable::detail
