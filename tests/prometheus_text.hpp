// SPDX-License-Identifier: Apache-2.0
#pragma once
// A reader of the Prometheus text format for the tests of /metrics: the samples of a scrape with
// their labels unescaped, and the TYPE of each family, so that a test asks for figures rather
// than matching the text.

#include <cstddef>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.hpp"

namespace durable::test::prometheus {

using Labels = std::map<std::string, std::string>;

struct Sample {
  std::string name;
  Labels labels;
  double value = 0;
};

struct Scrape {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  ///< family → counter, gauge, histogram...

  /// The samples named `name` whose labels include all of `match`.
  std::vector<Sample> of(const std::string& name, const Labels& match = {}) const {
    std::vector<Sample> found;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [key, value] : match) {
        const auto it = s.labels.find(key);
        all = all && it != s.labels.end() && it->second == value;
      }
      if (all) found.push_back(s);
    }
    return found;
  }
  /// The value of the one sample of `name` with exactly these labels, if there is one.
  std::optional<double> value(const std::string& name, const Labels& labels = {}) const {
    for (const Sample& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    return std::nullopt;
  }
  /// The sum of the samples of() gives.
  double sum(const std::string& name, const Labels& match = {}) const {
    double total = 0;
    for (const Sample& s : of(name, match)) total += s.value;
    return total;
  }
  /// The values the label `label` takes in the samples of `name`.
  std::set<std::string> values(const std::string& name, const std::string& label) const {
    std::set<std::string> found;
    for (const Sample& s : of(name)) {
      const auto it = s.labels.find(label);
      if (it != s.labels.end()) found.insert(it->second);
    }
    return found;
  }
};

/// Reads a scrape; throws std::runtime_error naming the line it cannot read.
inline Scrape parse(const std::string& text) {
  Scrape scrape;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const auto bad = [&line](const char* why) {
      return std::runtime_error(std::string(why) + " in the line: " + line);
    };
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::size_t space = line.find(' ', 7);
      if (space == std::string::npos) throw bad("no type");
      scrape.types[line.substr(7, space - 7)] = line.substr(space + 1);
      continue;
    }
    if (line[0] == '#') continue;
    Sample sample;
    std::size_t i = line.find_first_of("{ ");
    if (i == std::string::npos) throw bad("no value");
    sample.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      while (line.at(i) != '}') {
        const std::size_t eq = line.find("=\"", i);
        if (eq == std::string::npos) throw bad("a label without =\"");
        const std::string key = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; line.at(i) != '"'; ++i) {
          if (line[i] != '\\') {
            value += line[i];
            continue;
          }
          const char escaped = line.at(++i);
          if (escaped == 'n') {
            value += '\n';
          } else if (escaped == '\\' || escaped == '"') {
            value += escaped;
          } else {
            throw bad("an unknown escape");
          }
        }
        if (!sample.labels.emplace(key, value).second) throw bad("a repeated label");
        ++i;
        if (line.at(i) == ',') ++i;
      }
      ++i;
    }
    if (line.at(i) != ' ') throw bad("no space before the value");
    const std::string value = line.substr(i + 1);
    if (value == "+Inf") {
      sample.value = std::numeric_limits<double>::infinity();
    } else {
      std::size_t used = 0;
      sample.value = std::stod(value, &used);
      if (used != value.size()) throw bad("a value that is not a number");
    }
    scrape.samples.push_back(std::move(sample));
  }
  return scrape;
}

/// What `promtool check metrics` (Debian's prometheus package) says of a scrape, written to the
/// file `path` first: its exit code and its words (none when the scrape is clean).
inline std::pair<int, std::string> promtool_check(const std::string& text,
                                                  const std::string& path) {
  std::ofstream(path) << text;
  return run_shell("promtool check metrics < '" + path + "' 2>&1");
}

}  // namespace durable::test::prometheus
