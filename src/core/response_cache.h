// Note [Response cache]: after a name has been negotiated once, every rank
// remembers its signature under a bit index. In later rounds a rank that has
// the same request ready just sets that bit; one bitwise-AND allreduce then
// tells every rank which cached requests are ready everywhere, so a steady
// training loop skips the gather/broadcast of names. Insertions and erasures
// happen in the same order on every rank (they follow the broadcast plan), so
// bit indices agree everywhere.
#pragma once

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/request.h"

namespace mxplugin {

class ResponseCache {
 public:
  explicit ResponseCache(int capacity) : capacity_(capacity) {}

  // allgather and alltoall too: a bit set on every rank means every rank's
  // signature (its shape, its splits) equals the cached one, so the sizes
  // negotiated then are the sizes now, and the entry keeps them.
  static bool Cacheable(OpType op) {
    return op == OpType::kAllreduce || op == OpType::kBroadcast || op == OpType::kReducescatter ||
           op == OpType::kAllgather || op == OpType::kAlltoall;
  }
  // Bit of `meta.name` if cached with the same signature, else -1.
  int Lookup(const RequestMeta& meta) const;
  bool Contains(const std::string& name) const { return bits_.count(name) != 0; }
  // The cached names negotiated under `group` (RequestMeta::group), in order.
  const std::set<std::string>& NamesInGroup(const std::string& group) const;
  // The signature cached under `name`, which must be cached.
  const RequestMeta& Cached(const std::string& name) const { return entries_[bits_.at(name)].meta; }
  // No-op when full or already present. `sizes`: the response's (allgather, alltoall).
  void Put(const RequestMeta& meta, int32_t priority, const std::vector<int64_t>& sizes);
  void Erase(const std::string& name);
  const RequestMeta& meta(int bit) const { return entries_[bit].meta; }
  int32_t priority(int bit) const { return entries_[bit].priority; }
  const std::vector<int64_t>& sizes(int bit) const { return entries_[bit].sizes; }
  int num_bits() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    bool used = false;
    RequestMeta meta;
    int32_t priority = 0;
    std::vector<int64_t> sizes;
  };
  int capacity_;
  std::vector<Entry> entries_;
  std::vector<int> free_bits_;  // kept sorted descending: smallest free bit at the back
  std::unordered_map<std::string, int> bits_;
  std::unordered_map<std::string, std::set<std::string>> by_group_;
};

}  // namespace mxplugin
