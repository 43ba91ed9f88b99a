// The words of the coordinator's messages (MessageTable, its conflicts):
// shapes, rank lists and what each rank submitted, as the errors print them.
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/codes.h"
#include "core/request.h"

namespace mxplugin {
namespace message_text {

inline std::string ShapeText(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) s << ",";
  s << ")";
  return s.str();
}

inline std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? ", " : "") << ranks[i];
  return s.str();
}

// "float32 on ranks 0, 2; float16 on rank 1" (values[r] is rank r's, in
// order of first appearance; an empty value leaves its rank out); with
// `only_if_different`, "" when all values agree.
inline std::string ValuesByRank(const std::vector<std::string>& values, const std::vector<int>& global_ranks,
                         bool only_if_different = true) {
  std::vector<std::pair<std::string, std::vector<int>>> by_value;
  for (size_t r = 0; r < values.size(); ++r) {
    if (values[r].empty()) continue;
    auto it = std::find_if(by_value.begin(), by_value.end(), [&](const auto& g) { return g.first == values[r]; });
    if (it == by_value.end()) {
      by_value.push_back({values[r], {global_ranks[r]}});
    } else {
      it->second.push_back(global_ranks[r]);
    }
  }
  if (by_value.size() <= (only_if_different ? 1u : 0u)) return "";
  std::ostringstream s;
  for (size_t i = 0; i < by_value.size(); ++i) {
    s << (i ? "; " : "") << by_value[i].first << " on " << RankList(by_value[i].second);
  }
  return s.str();
}

template <typename Describe>
inline std::string Disagreement(const std::vector<RequestMeta>& metas, const std::vector<int>& global_ranks,
                         Describe describe) {
  std::vector<std::string> values;
  for (const auto& m : metas) values.push_back(describe(m));
  return ValuesByRank(values, global_ranks);
}

// What a rank submitted under a group name, for conflict messages.
inline std::string Submission(const RequestMeta& m) {
  std::string s = OpTypeName(m.op);
  if (m.group_size > 1) s += " (a group of " + std::to_string(m.group_size) + " tensors)";
  return s;
}

inline std::string Trailing(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "scalar";
  return "rank-" + std::to_string(shape.size()) + " with trailing dims " +
         ShapeText(std::vector<int64_t>(shape.begin() + 1, shape.end()));
}

}  // namespace message_text
}  // namespace mxplugin
