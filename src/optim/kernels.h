// Fused optimizer updates over flat float32 buffers, framework-neutral.
// Each Update() applies one step of the MXNet 1.9.1 operator named by its
// params struct to `size` elements, with the op's arithmetic in the op's
// order (see Note [Matching MXNet] in elementwise.cc). Single-threaded; the
// loops are written for the compiler to vectorise.
#pragma once

#include <array>
#include <cstdint>

#include "optim/params.h"

namespace mxplugin {
namespace optim {

constexpr int kMaxStates = 3;

// The buffers of one update; none may overlap another.
struct FlatBuffers {
  float* weight = nullptr;                // updated in place
  const float* grad = nullptr;            // read only
  std::array<float*, kMaxStates> states{};  // the op's state inputs, in its order
  int num_states = 0;                     // states[0, num_states) are used
  int64_t size = 0;                       // elements in each buffer
  // Tensors laid out back to back: tensor k is [offsets[k], offsets[k+1]).
  // num_segments + 1 entries, offsets[0] == 0, offsets[num_segments] == size.
  // Only LAMB (per-tensor norms) depends on them; null means one tensor.
  const int64_t* offsets = nullptr;
  int64_t num_segments = 0;
};

// states: none.
void Update(const SgdParams& p, const FlatBuffers& b);
// states: mom.
void Update(const SgdMomParams& p, const FlatBuffers& b);
// states: mom.
void Update(const NagMomParams& p, const FlatBuffers& b);
// states: mean, var.
void Update(const AdamParams& p, const FlatBuffers& b);
// states: n.
void Update(const RmsPropParams& p, const FlatBuffers& b);
// states: n, g, delta.
void Update(const RmsPropAlexParams& p, const FlatBuffers& b);
// states: history.
void Update(const AdaGradParams& p, const FlatBuffers& b);
// states: mean, var. Uses b.offsets for the per-tensor norms.
void Update(const LambParams& p, const FlatBuffers& b);

}  // namespace optim
}  // namespace mxplugin
