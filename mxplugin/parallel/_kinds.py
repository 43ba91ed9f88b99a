"""The NumPy interface (`npx.set_np()`, `mx.np.ndarray`) in mxplugin.parallel.

Note [Legacy inside]
The layers, the loss and the differentiable collectives are written with
MXNet's legacy operators, which refuse `mx.np.ndarray` inputs (Note [Array
kinds] in mxplugin/array_kinds.py). Every public entry therefore takes legacy
views of NumPy arrays (`as_nd_ndarray()`: the same memory, engine variable
and autograd entry, so gradients recorded through a view reach the caller's
array and the Parameter's gradient buffer), runs the legacy code, and hands
the results back in the caller's kind. A legacy array costs one isinstance
check.

The blocks (LegacyForward) do for NumPy inputs what HybridBlock.forward does
imperatively, with legacy views of the inputs and of the parameters' arrays
(which Gluon makes NumPy arrays for blocks built under set_np), and run
hybrid_forward with NumPy-array semantics off: a child block it calls (the
layers' Activation) then runs its legacy operator and returns a legacy array,
as in a legacy run, instead of choosing the NumPy one by the global mode.
NumPy shape semantics stay on: the legacy operators in mxplugin run under
them anyway (DistributedTrainer, the collectives).
"""
import mxnet as mx
from mxnet.gluon.parameter import DeferredInitializationError

from mxplugin.array_kinds import is_numpy, legacy, legacy_list, like


class LegacyForward:
    """Mixin for a HybridBlock whose hybrid_forward runs legacy operators
    imperatively: NumPy inputs run it on legacy views and get NumPy results
    (Note [Legacy inside]); legacy inputs and symbols take HybridBlock's path."""

    def forward(self, x, *args):
        if not is_numpy(x):  # the legacy path: Gluon's own forward, unchanged
            return super().forward(x, *args)
        return like(x, self._forward_legacy(x, *args))

    def _forward_legacy(self, x, *args):
        with x.ctx:
            params = self._legacy_params(x, args)
            with mx.util.np_array(False):  # Note [Legacy inside]: child blocks run their legacy operators
                return self.hybrid_forward(mx.nd, legacy(x), *legacy_list(list(args)), **params)

    def _legacy_params(self, x, args):
        """Legacy views of this block's parameters on x's context, finishing
        a deferred initialisation as HybridBlock.forward does."""
        try:
            params = {k: v.data(x.ctx) for k, v in self._reg_params.items()}
        except DeferredInitializationError:
            self._deferred_infer_shape(x, *args)
            for _, v in self.params.items():
                v._finish_deferred_init()
            params = {k: v.data(x.ctx) for k, v in self._reg_params.items()}
        return {k: legacy(v) for k, v in params.items()}


def set_data(param, value):
    """param.set_data(value) with `value` (either kind) in the kind of the
    parameter's arrays: Gluon refuses to assign a legacy array to a NumPy one
    and the reverse. An uninitialised parameter takes `value` as it is."""
    if param._data is not None:
        value = like(param._data[0], legacy(value))
    param.set_data(value)

