// "[0, 2, 3]": how error messages show a list of ranks.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace mxplugin {

inline std::string RanksText(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? ", " : "") << ranks[i];
  s << "]";
  return s.str();
}

}  // namespace mxplugin
