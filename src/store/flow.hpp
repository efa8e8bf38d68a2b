// SPDX-License-Identifier: Apache-2.0
#pragma once
// Flow control at claim time (claims.cpp): which due runs a claim may make running under their
// workflows' concurrency limits (in all, or per key) and rate limits (per key).
//
// Runs carry their keys (runs.flow_key, runs.rate_key), stamped when they are created by a
// process that knows the workflow's rule (the workflows table keeps it), or else by their first
// claim. A claim counts the running runs of each limited workflow (per key) and the runs that
// began within the rate period, holding the workflow's lock where writers run side by side. A
// key at its concurrency limit is left out of the claim's query, so that the runs of one busy
// tenant are not read over and over. A run over its rate limit is not left due: its due time
// moves to when the window will have room, so that no worker spins on it, and none is dropped.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "store.hpp"
#include "store/sql.hpp"

namespace durable::detail {

/// The key of a run under a rule's JSON pointer: the text found there, other values as JSON
/// text, "" when the input has nothing there or the pointer is empty.
std::string key_at(const json& input, const std::string& pointer);
/// The same of an input's stored text (which may not parse: then "").
std::string key_at(const std::string& input_text, const std::string& pointer);

/// A due run as the gate sees it.
struct GatedRun {
  std::string id, workflow;
  const std::string* input = nullptr;    ///< its stored text
  std::optional<std::string> flow_key;   ///< as stored; none: to be computed
  std::optional<std::string> rate_key;   ///< as stored; none: to be computed
  /// A step body of it began before (runs.first_body_at): the rate limit does not apply.
  bool body_began = false;
};

class FlowGate {
 public:
  /// Counts what the request's rules need, inside the claim's transaction; `lock` takes a key
  /// lock (SqlTables::lock).
  FlowGate(sql::Connection& db, const ClaimRequest& request,
           const std::function<void(const std::string&)>& lock);

  /// `workflows` without those at a limit for the whole workflow.
  std::vector<std::string> open(const std::vector<std::string>& workflows) const;
  /// A condition on `runs` that leaves out the runs of keys at their limit (" AND NOT (...)",
  /// or nothing), and the binding of its parameters from `index` on.
  std::string exclusion() const;
  int bind_exclusion(sql::Query& query, int index) const;

  enum class Verdict {
    admit,     ///< may be claimed: call took() if it is
    held,      ///< at a concurrency limit: left due, and out of the next query
    deferred,  ///< over its rate limit: its due time was moved (written here)
  };
  Verdict check(const GatedRun& run);
  /// The run was claimed: it counts from now on. Returns the keys to stamp on it (none when its
  /// workflow has no rule for one).
  struct Stamp {
    std::optional<std::string> flow_key, rate_key;
  };
  Stamp took(const GatedRun& run);

 private:
  // A key's rate window: the runs that hold a slot of it now. A run holds one from its claim
  // (while it runs with no body begun, as `reserved`) until a period after its first body began
  // (`began`, by runs.first_body_at): so whatever the delay between a claim and the body, the
  // first bodies that begin in any period are at most as many as the slots.
  struct Window {
    std::vector<std::int64_t> began;  // first bodies within the period, oldest first
    int reserved = 0;                 // claimed, running, no body begun yet
    int deferred = 0;                 // runs this claim held back for a later slot
    int held() const { return static_cast<int>(began.size()) + reserved; }
  };
  Window& window(const std::string& workflow, const std::string& key, const FlowRule& rule);
  std::string flow_key(const GatedRun& run, const FlowRule& rule) const;
  std::string rate_key(const GatedRun& run, const FlowRule& rule) const;

  sql::Connection* db_;
  const ClaimRequest* request_;
  std::map<std::string, int> room_;  // workflow-wide limits: runs it may still make running
  std::map<std::string, std::map<std::string, int>> running_;  // keyed: per workflow, per key
  std::map<std::string, std::set<std::string>> full_;          // keyed: keys at the limit
  std::map<std::pair<std::string, std::string>, Window> windows_;
};

}  // namespace durable::detail
