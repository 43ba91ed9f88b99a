#include "optim/update.h"

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/status.h"

namespace mxplugin {
namespace optim {
namespace {

[[noreturn]] void Invalid(OptimizerKind kind, const std::string& what) {
  throw Error(Status::InvalidArgument(std::string("fused ") + OptimizerName(kind) + ": " + what));
}

template <size_t I = 0>
OptimizerParams DefaultAt(size_t index) {
  if constexpr (I < std::variant_size_v<OptimizerParams>) {
    if (index == I) return OptimizerParams(std::in_place_index<I>);
    return DefaultAt<I + 1>(index);
  } else {
    throw Error(Status::InvalidArgument("unknown optimizer kind " + std::to_string(index)));
  }
}

void CheckSegments(OptimizerKind kind, const FlatBuffers& b) {
  if (b.offsets == nullptr) {
    if (b.num_segments != 0) Invalid(kind, "segment count given without offsets");
    return;
  }
  if (b.num_segments < 1) Invalid(kind, "offsets given for " + std::to_string(b.num_segments) + " segments");
  if (b.offsets[0] != 0) Invalid(kind, "the first segment offset is " + std::to_string(b.offsets[0]) + ", not 0");
  for (int64_t k = 0; k < b.num_segments; ++k) {
    if (b.offsets[k + 1] < b.offsets[k]) {
      Invalid(kind, "segment offsets decrease at index " + std::to_string(k + 1) + " (" +
                        std::to_string(b.offsets[k]) + " then " + std::to_string(b.offsets[k + 1]) + ")");
    }
  }
  if (b.offsets[b.num_segments] != b.size) {
    Invalid(kind, "the last segment offset is " + std::to_string(b.offsets[b.num_segments]) +
                      " but the buffers hold " + std::to_string(b.size) + " elements");
  }
}

// The kernels' pointers are __restrict__: no two buffers may share memory.
void CheckDisjoint(OptimizerKind kind, const FlatBuffers& b) {
  const char* names[2 + kMaxStates] = {"weight", "grad", "state 0", "state 1", "state 2"};
  uintptr_t begin[2 + kMaxStates] = {reinterpret_cast<uintptr_t>(b.weight), reinterpret_cast<uintptr_t>(b.grad)};
  for (int s = 0; s < b.num_states; ++s) begin[2 + s] = reinterpret_cast<uintptr_t>(b.states[s]);
  const uintptr_t bytes = static_cast<uintptr_t>(b.size) * sizeof(float);
  const int count = 2 + b.num_states;
  for (int x = 0; x < count; ++x) {
    for (int y = x + 1; y < count; ++y) {
      if (begin[x] < begin[y] + bytes && begin[y] < begin[x] + bytes) {
        Invalid(kind, std::string(names[x]) + " and " + names[y] + " overlap in memory");
      }
    }
  }
}

}  // namespace

bool IsValidOptimizerKind(int32_t v) { return v >= 0 && v < kNumOptimizerKinds; }

OptimizerKind KindOf(const OptimizerParams& params) { return static_cast<OptimizerKind>(params.index()); }

// Each alternative's position is its OptimizerKind value (the C API's codes).
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<size_t>(OptimizerKind::kSgd), OptimizerParams>,
                             SgdParams> &&
              std::is_same_v<std::variant_alternative_t<static_cast<size_t>(OptimizerKind::kSgdMom), OptimizerParams>,
                             SgdMomParams> &&
              std::is_same_v<std::variant_alternative_t<static_cast<size_t>(OptimizerKind::kNagMom), OptimizerParams>,
                             NagMomParams> &&
              std::is_same_v<std::variant_alternative_t<static_cast<size_t>(OptimizerKind::kAdam), OptimizerParams>,
                             AdamParams> &&
              std::is_same_v<std::variant_alternative_t<static_cast<size_t>(OptimizerKind::kRmsProp), OptimizerParams>,
                             RmsPropParams> &&
              std::is_same_v<
                  std::variant_alternative_t<static_cast<size_t>(OptimizerKind::kRmsPropAlex), OptimizerParams>,
                  RmsPropAlexParams> &&
              std::is_same_v<std::variant_alternative_t<static_cast<size_t>(OptimizerKind::kAdaGrad), OptimizerParams>,
                             AdaGradParams> &&
              std::is_same_v<std::variant_alternative_t<static_cast<size_t>(OptimizerKind::kLamb), OptimizerParams>,
                             LambParams>,
              "OptimizerKind values must be the indices of OptimizerParams' alternatives");

const char* OptimizerName(OptimizerKind kind) {
  return std::visit([](const auto& p) { return std::decay_t<decltype(p)>::kOpName; }, DefaultParams(kind));
}

const char* KindName(OptimizerKind kind) {
  return std::visit([](const auto& p) { return std::decay_t<decltype(p)>::kKind; }, DefaultParams(kind));
}

int NumStates(OptimizerKind kind) {
  return std::visit([](const auto& p) { return std::decay_t<decltype(p)>::kNumStates; }, DefaultParams(kind));
}

const char* StateNames(OptimizerKind kind) {
  return std::visit([](const auto& p) { return std::decay_t<decltype(p)>::kStateNames; }, DefaultParams(kind));
}

OptimizerParams DefaultParams(OptimizerKind kind) { return DefaultAt(static_cast<size_t>(kind)); }

void CheckArguments(const OptimizerParams& params, const FlatBuffers& b) {
  const OptimizerKind kind = KindOf(params);
  if (b.size < 0) Invalid(kind, "negative size " + std::to_string(b.size));
  const int states = NumStates(kind);
  if (b.num_states != states) {
    Invalid(kind, "takes " + std::to_string(states) + " state buffer(s) (" + StateNames(kind) + "), got " +
                      std::to_string(b.num_states));
  }
  CheckSegments(kind, b);
  if (const auto* lamb = std::get_if<LambParams>(&params); lamb != nullptr && lamb->t < 1) {
    Invalid(kind, "t (the update count) must be >= 1, got " + std::to_string(lamb->t));
  }
}

void CheckUpdate(const OptimizerParams& params, const FlatBuffers& b) {
  CheckArguments(params, b);
  const OptimizerKind kind = KindOf(params);
  if (b.size == 0) return;
  if (b.weight == nullptr) Invalid(kind, "weight is null");
  if (b.grad == nullptr) Invalid(kind, "grad is null");
  for (int s = 0; s < b.num_states; ++s) {
    if (b.states[s] == nullptr) Invalid(kind, "state " + std::to_string(s) + " is null");
  }
  CheckDisjoint(kind, b);
}

void ApplyUpdate(const OptimizerParams& params, const FlatBuffers& buffers) {
  if (buffers.size == 0) return;
  std::visit([&](const auto& p) { Update(p, buffers); }, params);
}

}  // namespace optim
}  // namespace mxplugin
