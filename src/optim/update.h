// One entry for every fused optimizer update: which optimizer (the variant's
// alternative), its buffers, argument checks, and the dispatch to kernels.h.
#pragma once

#include <cstdint>
#include <variant>

#include "optim/kernels.h"
#include "optim/params.h"

namespace mxplugin {
namespace optim {

// Integer values are part of the C API (src/c_api_optim.h) and equal the
// index of the alternative in OptimizerParams (checked in update.cc).
enum class OptimizerKind : int32_t {
  kSgd = 0,
  kSgdMom = 1,
  kNagMom = 2,
  kAdam = 3,
  kRmsProp = 4,
  kRmsPropAlex = 5,
  kAdaGrad = 6,
  kLamb = 7,
};

// The one table of fused optimizers: alternative i is OptimizerKind i, and
// each struct describes itself (params.h).
using OptimizerParams = std::variant<SgdParams, SgdMomParams, NagMomParams, AdamParams, RmsPropParams,
                                     RmsPropAlexParams, AdaGradParams, LambParams>;
constexpr int kNumOptimizerKinds = static_cast<int>(std::variant_size_v<OptimizerParams>);

bool IsValidOptimizerKind(int32_t v);
OptimizerKind KindOf(const OptimizerParams& params);
// The MXNet op name ("sgd_mom_update", ...; "adagrad" for the Python optimizer).
const char* OptimizerName(OptimizerKind kind);
// The name Python uses for `kind` ("sgd_mom", ...).
const char* KindName(OptimizerKind kind);
// How many state buffers the update reads and writes (FlatBuffers::states).
int NumStates(OptimizerKind kind);
// Their names in the op's argument order ("mean, var"; "" for none).
const char* StateNames(OptimizerKind kind);
// The default hyper-parameters of `kind` (the op's defaults; lr = 0).
OptimizerParams DefaultParams(OptimizerKind kind);

// Checks what does not depend on the buffers' addresses: the size, the
// number of states, the segment offsets, a LAMB t >= 1. Throws
// Error(InvalidArgument) naming what is wrong.
void CheckArguments(const OptimizerParams& params, const FlatBuffers& buffers);

// CheckArguments, then that no buffer is null and no two overlap.
void CheckUpdate(const OptimizerParams& params, const FlatBuffers& buffers);

// Runs the kernel. Arguments must have passed CheckUpdate.
void ApplyUpdate(const OptimizerParams& params, const FlatBuffers& buffers);

}  // namespace optim
}  // namespace mxplugin
