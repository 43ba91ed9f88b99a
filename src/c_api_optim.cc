// C entry points of the fused optimizer updates; C++ exceptions become
// status codes here, recorded through c_api.h's mxp_set_last_error.
#include "c_api_optim.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "c_api.h"
#include "c_api_guard.h"
#include "common/status.h"
#include "optim/update.h"

#ifdef MXPLUGIN_WITH_MXNET
#include "mxnet/optimizer_op.h"
#endif

using mxplugin::Error;
using mxplugin::Status;
namespace optim = mxplugin::optim;

namespace {

using mxplugin::capi::Guard;

#ifndef MXPLUGIN_WITH_MXNET
int MXNetNotBuilt() {
  return mxplugin::capi::Report(Status::Internal("mxplugin was built without MXNet (MXPLUGIN_WITH_MXNET=0)"));
}
#endif

// Note [Optimizer fields]: the one table of which mxp_optim_params field
// belongs to which optimizer, under which name: f(name, params field, C field).
template <typename F>
void ForEachField(optim::CommonParams& p, mxp_optim_params& c, F&& f) {
  f("lr", p.lr, c.lr);
  f("wd", p.wd, c.wd);
  f("rescale_grad", p.rescale_grad, c.rescale_grad);
  f("clip_gradient", p.clip_gradient, c.clip_gradient);
}

template <typename F>
void ForEachField(optim::SgdMomParams& p, mxp_optim_params& c, F&& f) {
  ForEachField(static_cast<optim::CommonParams&>(p), c, f);
  f("momentum", p.momentum, c.momentum);
}

template <typename F>
void ForEachField(optim::NagMomParams& p, mxp_optim_params& c, F&& f) {
  ForEachField(static_cast<optim::CommonParams&>(p), c, f);
  f("momentum", p.momentum, c.momentum);
}

template <typename F>
void ForEachField(optim::AdamParams& p, mxp_optim_params& c, F&& f) {
  ForEachField(static_cast<optim::CommonParams&>(p), c, f);
  f("beta1", p.beta1, c.beta1);
  f("beta2", p.beta2, c.beta2);
  f("epsilon", p.epsilon, c.epsilon);
}

template <typename F>
void ForEachField(optim::RmsPropParams& p, mxp_optim_params& c, F&& f) {
  ForEachField(static_cast<optim::CommonParams&>(p), c, f);
  f("gamma1", p.gamma1, c.gamma1);
  f("epsilon", p.epsilon, c.epsilon);
  f("clip_weights", p.clip_weights, c.clip_weights);
}

template <typename F>
void ForEachField(optim::RmsPropAlexParams& p, mxp_optim_params& c, F&& f) {
  ForEachField(static_cast<optim::CommonParams&>(p), c, f);
  f("gamma1", p.gamma1, c.gamma1);
  f("gamma2", p.gamma2, c.gamma2);
  f("epsilon", p.epsilon, c.epsilon);
  f("clip_weights", p.clip_weights, c.clip_weights);
}

template <typename F>
void ForEachField(optim::AdaGradParams& p, mxp_optim_params& c, F&& f) {
  ForEachField(static_cast<optim::CommonParams&>(p), c, f);
  f("epsilon", p.epsilon, c.epsilon);
}

template <typename F>
void ForEachField(optim::LambParams& p, mxp_optim_params& c, F&& f) {
  ForEachField(static_cast<optim::CommonParams&>(p), c, f);
  f("beta1", p.beta1, c.beta1);
  f("beta2", p.beta2, c.beta2);
  f("epsilon", p.epsilon, c.epsilon);
  f("t", p.t, c.t);
  f("bias_correction", p.bias_correction, c.bias_correction);
  f("lower_bound", p.lower_bound, c.lower_bound);
  f("upper_bound", p.upper_bound, c.upper_bound);
}

optim::OptimizerKind KindFromC(int32_t kind) {
  if (!optim::IsValidOptimizerKind(kind)) {
    throw Error(Status::InvalidArgument("unknown fused optimizer kind " + std::to_string(kind)));
  }
  return static_cast<optim::OptimizerKind>(kind);
}

optim::OptimizerParams ParamsFromC(const mxp_optim_params& c) {
  optim::OptimizerParams params = optim::DefaultParams(KindFromC(c.kind));
  mxp_optim_params fields = c;
  std::visit([&](auto& p) { ForEachField(p, fields, [](const char*, auto& pf, auto& cf) { pf = cf; }); },
             params);
  return params;
}

// Converts `value` for a C field of type Field (float, int32 count or flag).
template <typename Param, typename Field>
Field FieldValue(const char* name, double value) {
  if constexpr (std::is_same_v<Param, bool>) {
    return value != 0.0 ? 1 : 0;
  } else if constexpr (std::is_integral_v<Field>) {
    if (!(value == std::floor(value) && value >= INT32_MIN && value <= INT32_MAX)) {
      throw Error(Status::InvalidArgument(std::string("fused optimizer parameter '") + name +
                                          "' must be an integer, got " + std::to_string(value)));
    }
    return static_cast<Field>(value);
  } else {
    return static_cast<Field>(value);
  }
}

}  // namespace

extern "C" {

int mxp_optim_default_params(int32_t kind, mxp_optim_params* out) {
  return Guard([&] {
    optim::OptimizerParams params = optim::DefaultParams(KindFromC(kind));
    mxp_optim_params c;
    std::memset(&c, 0, sizeof(c));
    c.kind = kind;
    std::visit([&](auto& p) { ForEachField(p, c, [](const char*, auto& pf, auto& cf) { cf = pf; }); }, params);
    *out = c;
  });
}

int mxp_optim_set_param(mxp_optim_params* params, const char* name, double value) {
  return Guard([&] {
    optim::OptimizerParams typed = optim::DefaultParams(KindFromC(params->kind));
    bool found = false;
    std::string valid;
    std::visit(
        [&](auto& p) {
          ForEachField(p, *params, [&](const char* field, auto& pf, auto& cf) {
            valid += valid.empty() ? field : std::string(", ") + field;
            if (std::strcmp(field, name) != 0) return;
            found = true;
            cf = FieldValue<std::decay_t<decltype(pf)>, std::decay_t<decltype(cf)>>(field, value);
          });
        },
        typed);
    if (!found) {
      throw Error(Status::InvalidArgument(std::string("fused ") + optim::OptimizerName(KindFromC(params->kind)) +
                                          " has no parameter '" + name + "'; it takes " + valid));
    }
  });
}

int mxp_optim_num_states(int32_t kind, int32_t* out) {
  return Guard([&] { *out = optim::NumStates(KindFromC(kind)); });
}

int mxp_optim_num_kinds(int32_t* out) {
  return Guard([&] { *out = optim::kNumOptimizerKinds; });
}

int mxp_optim_kind_name(int32_t kind, const char** out) {
  return Guard([&] { *out = optim::KindName(KindFromC(kind)); });
}

int mxp_optim_update_raw(const mxp_optim_params* params, const mxp_optim_buffers* buffers) {
  return Guard([&] {
    const optim::OptimizerParams typed = ParamsFromC(*params);
    const mxp_optim_buffers& c = *buffers;
    if (c.num_states < 0 || c.num_states > optim::kMaxStates) {
      throw Error(Status::InvalidArgument("num_states must be in [0, 3], got " + std::to_string(c.num_states)));
    }
    optim::FlatBuffers b;
    b.weight = static_cast<float*>(c.weight);
    b.grad = static_cast<const float*>(c.grad);
    for (int s = 0; s < c.num_states; ++s) b.states[s] = static_cast<float*>(c.states[s]);
    b.num_states = c.num_states;
    b.size = c.size;
    b.offsets = c.offsets;
    b.num_segments = c.num_segments;
    optim::CheckUpdate(typed, b);
    optim::ApplyUpdate(typed, b);
  });
}

#ifdef MXPLUGIN_WITH_MXNET

int mxp_optim_update_mxnet(const mxp_optim_params* params, const mxp_optim_buffers* buffers, int32_t priority) {
  return Guard([&] {
    const mxp_optim_buffers& c = *buffers;
    if (c.num_states < 0 || c.num_states > optim::kMaxStates) {
      throw Error(Status::InvalidArgument("num_states must be in [0, 3], got " + std::to_string(c.num_states)));
    }
    mxplugin::mxnet_adapter::OptimizerArrays arrays;
    arrays.weight = c.weight;
    arrays.grad = c.grad;
    arrays.states.assign(c.states, c.states + c.num_states);
    if (c.offsets == nullptr ? c.num_segments != 0 : c.num_segments < 1) {
      throw Error(Status::InvalidArgument("segment offsets and count disagree (count " +
                                          std::to_string(c.num_segments) + ")"));
    }
    std::vector<int64_t> offsets;
    if (c.offsets != nullptr) offsets.assign(c.offsets, c.offsets + c.num_segments + 1);
    mxplugin::mxnet_adapter::PushOptimizerUpdate(ParamsFromC(*params), arrays, std::move(offsets), priority);
  });
}

int mxp_optim_update_mxnet_multi(const mxp_optim_params* params, void* const* weights, int32_t num_weights,
                                 const mxp_optim_buffers* buffers, int32_t priority) {
  return Guard([&] {
    const mxp_optim_buffers& c = *buffers;
    if (c.num_states < 0 || c.num_states > optim::kMaxStates) {
      throw Error(Status::InvalidArgument("num_states must be in [0, 3], got " + std::to_string(c.num_states)));
    }
    if (num_weights < 1 || c.offsets == nullptr || c.num_segments != num_weights) {
      throw Error(Status::InvalidArgument("a multi-weight update needs offsets for exactly num_weights segments"));
    }
    std::vector<int64_t> offsets(c.offsets, c.offsets + c.num_segments + 1);
    mxplugin::mxnet_adapter::PushMultiWeightUpdate(ParamsFromC(*params),
                                                   std::vector<void*>(weights, weights + num_weights), c.grad,
                                                   std::vector<void*>(c.states, c.states + c.num_states),
                                                   std::move(offsets), priority);
  });
}

#else

int mxp_optim_update_mxnet(const mxp_optim_params*, const mxp_optim_buffers*, int32_t) {
  return MXNetNotBuilt();
}

int mxp_optim_update_mxnet_multi(const mxp_optim_params*, void* const*, int32_t, const mxp_optim_buffers*, int32_t) {
  return MXNetNotBuilt();
}

#endif  // MXPLUGIN_WITH_MXNET

}  // extern "C"
