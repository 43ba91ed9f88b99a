// Where each rank's block lies in the collectives whose sizes vary by rank:
// element counts per rank, computed from a request and the negotiated
// response. Shared by the CPU and GPU executors so both lay data out alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/request.h"

namespace mxplugin {

inline std::vector<int64_t> Displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

inline Status OutputHolds(const Request& req, int64_t total) {
  if (total == req.output.num_elements()) return Status::Ok();
  return Status::InvalidArgument(std::string(OpTypeName(req.meta.op)) + " '" + req.meta.name + "': output holds " +
                                 std::to_string(req.output.num_elements()) + " elements, ranks send " +
                                 std::to_string(total));
}

// Allgather: every rank's element count (rows from the response).
inline Status AllgatherCounts(const Request& req, const Response& resp, std::vector<int64_t>* counts) {
  const int64_t row = req.input.row_elements();
  int64_t total = 0;
  counts->clear();
  for (int64_t rows : resp.sizes) {
    counts->push_back(rows * row);
    total += rows * row;
  }
  return OutputHolds(req, total);
}

// Alltoall: what this rank (`me` of `size`) sends to and receives from each rank.
inline Status AlltoallCounts(const Request& req, const Response& resp, int me, int size,
                             std::vector<int64_t>* send_counts, std::vector<int64_t>* recv_counts) {
  const int64_t row = req.input.row_elements();
  send_counts->assign(size, 0);
  recv_counts->assign(size, 0);
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    (*send_counts)[r] = req.meta.splits[r] * row;
    (*recv_counts)[r] = resp.sizes[static_cast<size_t>(r) * size + me] * row;
    total += (*recv_counts)[r];
  }
  return OutputHolds(req, total);
}

// Reducescatter: the block of every rank; lower ranks get the extra rows.
inline Status ReducescatterCounts(const Request& req, int me, int size, std::vector<int64_t>* counts) {
  const int64_t row = req.input.row_elements();
  const int64_t rows = req.input.shape.empty() ? 1 : req.input.shape[0];
  counts->assign(size, rows / size);
  for (int r = 0; r < rows % size; ++r) ++(*counts)[r];
  for (auto& c : *counts) c *= row;
  if ((*counts)[me] != req.output.num_elements()) {
    return Status::InvalidArgument("reducescatter '" + req.meta.name + "': output has the wrong size");
  }
  return Status::Ok();
}

}  // namespace mxplugin
