#include "core/response_cache.h"

#include <algorithm>
#include <functional>

namespace mxplugin {

int ResponseCache::Lookup(const RequestMeta& meta) const {
  auto it = bits_.find(meta.name);
  if (it == bits_.end()) return -1;
  return entries_[it->second].meta.SameSignature(meta) ? it->second : -1;
}

void ResponseCache::Put(const RequestMeta& meta, int32_t priority, const std::vector<int64_t>& sizes) {
  if (bits_.count(meta.name)) return;
  int bit;
  if (!free_bits_.empty()) {
    bit = free_bits_.back();
    free_bits_.pop_back();
  } else if (static_cast<int>(entries_.size()) < capacity_) {
    bit = static_cast<int>(entries_.size());
    entries_.emplace_back();
  } else {
    return;
  }
  entries_[bit] = Entry{true, meta, priority, sizes};
  bits_[meta.name] = bit;
  by_group_[meta.group].insert(meta.name);
}

const std::set<std::string>& ResponseCache::NamesInGroup(const std::string& group) const {
  static const std::set<std::string> kNone;
  auto it = by_group_.find(group);
  return it == by_group_.end() ? kNone : it->second;
}

void ResponseCache::Erase(const std::string& name) {
  auto it = bits_.find(name);
  if (it == bits_.end()) return;
  auto group = by_group_.find(entries_[it->second].meta.group);
  if (group != by_group_.end()) {
    group->second.erase(name);
    if (group->second.empty()) by_group_.erase(group);
  }
  entries_[it->second] = Entry{};
  free_bits_.push_back(it->second);
  std::sort(free_bits_.begin(), free_bits_.end(), std::greater<int>());
  bits_.erase(it);
}

}  // namespace mxplugin
