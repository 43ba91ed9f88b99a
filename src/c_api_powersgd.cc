// C entry points of PowerSGD's passes; C++ exceptions become status codes
// here, recorded through c_api.h's mxp_set_last_error.
#include "c_api_powersgd.h"

#include <string>
#include <vector>

#include "c_api.h"
#include "c_api_guard.h"
#include "common/status.h"
#include "compress/powersgd.h"

#ifdef MXPLUGIN_WITH_MXNET
#include "mxnet/powersgd_op.h"
#endif

using mxplugin::Error;
using mxplugin::Status;
namespace compress = mxplugin::compress;

namespace {

compress::PowerSgdStage StageOf(int32_t stage) {
  if (stage < 0 || stage >= compress::kPowerSgdStages) {
    throw Error(Status::InvalidArgument("PowerSGD: stage must be in [0, " +
                                        std::to_string(compress::kPowerSgdStages - 1) + "], got " +
                                        std::to_string(stage)));
  }
  return static_cast<compress::PowerSgdStage>(stage);
}

void CheckCount(const mxp_powersgd_matrix* matrices, int32_t count) {
  if (count < 1 || matrices == nullptr) {
    throw Error(Status::InvalidArgument("PowerSGD: a stage needs at least one matrix, got " + std::to_string(count)));
  }
}

}  // namespace

extern "C" {

int mxp_powersgd_num_stages(int32_t* out) {
  return mxplugin::capi::Guard([&] { *out = compress::kPowerSgdStages; });
}

int mxp_powersgd_stage_raw(int32_t stage, const mxp_powersgd_matrix* matrices, int32_t count) {
  return mxplugin::capi::Guard([&] {
    const compress::PowerSgdStage which = StageOf(stage);
    CheckCount(matrices, count);
    std::vector<compress::PowerSgdMatrix> all(count);
    for (int32_t i = 0; i < count; ++i) {
      const mxp_powersgd_matrix& c = matrices[i];
      compress::PowerSgdMatrix& a = all[i];
      a.grad = static_cast<float*>(c.grad);
      a.error = static_cast<float*>(c.error);
      a.p = static_cast<float*>(c.p);
      a.q = static_cast<float*>(c.q);
      a.m = c.m;
      a.n = c.n;
      a.rank = c.rank;
      compress::CheckPowerSgdShape(a);
      if (!a.grad || !a.error || !a.p || !a.q) {
        throw Error(Status::InvalidArgument("PowerSGD: matrix " + std::to_string(i) + " has a null buffer"));
      }
    }
    for (const auto& a : all) compress::RunPowerSgdStage(which, a);
  });
}

#ifdef MXPLUGIN_WITH_MXNET

int mxp_powersgd_stage_mxnet(int32_t stage, const mxp_powersgd_matrix* matrices, int32_t count, int32_t priority) {
  return mxplugin::capi::Guard([&] {
    const compress::PowerSgdStage which = StageOf(stage);
    CheckCount(matrices, count);
    std::vector<mxplugin::mxnet_adapter::PowerSgdArrays> all(count);
    for (int32_t i = 0; i < count; ++i) {
      all[i].grad = matrices[i].grad;
      all[i].error = matrices[i].error;
      all[i].p = matrices[i].p;
      all[i].q = matrices[i].q;
      all[i].m = matrices[i].m;
      all[i].n = matrices[i].n;
      all[i].rank = matrices[i].rank;
    }
    mxplugin::mxnet_adapter::PushPowerSgdStage(which, all, priority);
  });
}

#else

int mxp_powersgd_stage_mxnet(int32_t, const mxp_powersgd_matrix*, int32_t, int32_t) {
  return mxplugin::capi::Report(Status::Internal("mxplugin was built without MXNet (MXPLUGIN_WITH_MXNET=0)"));
}

#endif  // MXPLUGIN_WITH_MXNET

}  // extern "C"
