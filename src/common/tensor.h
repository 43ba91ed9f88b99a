// A framework-neutral view of a tensor: where its data is and what it holds.
// The core never owns tensor memory; adapters keep it alive until completion.
#pragma once

#include <cstdint>
#include <vector>

#include "common/types.h"

namespace mxplugin {

struct TensorRef {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DataType dtype = DataType::kFloat32;
  int device = kCpuDevice;
  // GPU tensors: the cudaStream_t the producer's work was queued on (nullptr:
  // the legacy default stream). Core::Enqueue records a ready event on it from
  // the calling thread; outputs are complete when the completion callback runs.
  void* stream = nullptr;

  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t num_bytes() const { return num_elements() * static_cast<int64_t>(DataTypeSize(dtype)); }
  // Elements per first-dimension row (1 for scalars).
  int64_t row_elements() const {
    int64_t n = 1;
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
  }
};

}  // namespace mxplugin
