// Note [Outputs the core sizes]: an allgather's or alltoall's output needs
// every rank's rows. The MXNet path learns them first, in a blocking
// exchange of sizes (mxplugin/exchange.py), because MXNet needs an op's
// outputs when it is pushed; a caller that waits for the result anyway
// (small host allgathers and alltoalls, mxplugin/host_exchange.py) leaves
// the output to the core instead, which sizes it here from the negotiated
// rows: one round instead of two. The caller may say where the output goes
// (SizedOutput::place: the MXNet adapter makes the NDArray there), else it
// lies in SizedOutput::bytes.
#include "core/sized_output.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace mxplugin {
namespace {

Status SizeOutput(Request& req, std::vector<int64_t> from_each, int64_t exchanged_rows) {
  SizedOutput& sized = *req.sized_output;
  int64_t rows = 0;
  for (int64_t r : from_each) rows += r;
  req.output.shape = req.input.shape;
  req.output.shape[0] = rows;
  sized.rows = rows;
  sized.from_each = std::move(from_each);
  sized.exchanged_rows = exchanged_rows;
  const size_t bytes = static_cast<size_t>(req.output.num_bytes());
  Status placed = Status::Ok();
  if (sized.place) {
    try {
      req.output.data = sized.place(rows, bytes);
      return placed;
    } catch (const std::exception& e) {
      placed = Status::Internal(std::string(OpTypeName(req.meta.op)) + " '" + req.meta.name +
                                "': its output could not be made: " + e.what());
    }
  }
  // Without a place, or failing one (which fails the op, but only after this
  // rank has taken part in the transfer: the other ranks are in it).
  sized.bytes.resize(bytes);
  req.output.data = sized.bytes.data();
  return placed;
}

}  // namespace

Status SizeAllgatherOutput(Request& req, const Response& resp) {
  int64_t rows = 0;
  for (int64_t r : resp.sizes) rows += r;
  return SizeOutput(req, resp.sizes, rows);
}

// resp.sizes: every pair's rows, sender-major (sizes[from * size + to]).
Status SizeAlltoallOutput(Request& req, const Response& resp, int me, int size) {
  std::vector<int64_t> from_each(static_cast<size_t>(size));
  int64_t exchanged = 0;
  for (int r = 0; r < size; ++r) from_each[r] = resp.sizes[static_cast<size_t>(r) * size + me];
  for (int64_t rows : resp.sizes) exchanged += rows;
  return SizeOutput(req, std::move(from_each), exchanged);
}

}  // namespace mxplugin
