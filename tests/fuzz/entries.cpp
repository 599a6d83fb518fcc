// Every fuzz entry point (entries.h): the parts' tables in one list.
#include "entries.h"

namespace troupe::fuzz {

const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = [] {
    std::vector<Entry> v;
    for (auto part : {data_entries, metrics_entries, actors_entries, jit_entries})
      for (auto& e : part()) v.push_back(std::move(e));
    return v;
  }();
  return all;
}

const Entry* find(std::string_view name) {
  for (const auto& e : entries())
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace troupe::fuzz
