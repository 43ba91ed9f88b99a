"""The core's dtype codes of MXNet arrays, and the (dtype code, device,
shape) a collective's Op record describes an array by."""
import numpy as np

from mxplugin import calls

# MXNet 1.9.1's bfloat16: NumPy has no such type, MXNet names it by this dtype.
BFLOAT16 = np.dtype([("bfloat16", np.uint16)])

_dtype_by_type = {}  # filled lazily from the core's codes: NumPy type or dtype -> dtype code


def code_of(dtype):
    """The core's code of an NDArray dtype, None if the core has none. The
    codes come from the binding (their one definition is src/common/codes.h).
    MXNet hands dtypes out in two forms: a legacy NDArray's is a NumPy type
    (np.float32), a NumPy-interface array's a numpy.dtype instance; both are
    keys (they hash differently). NumPy has no bfloat16: MXNet gives its
    arrays the dtype BFLOAT16."""
    if not _dtype_by_type:
        for name, code in calls.core_module().DTYPES.items():
            try:
                _dtype_by_type[np.dtype(name).type] = code
                _dtype_by_type[np.dtype(name)] = code
            except TypeError:
                pass
        _dtype_by_type[BFLOAT16] = calls.core_module().DTYPES["bfloat16"]
    code = _dtype_by_type.get(dtype)
    if code is None and isinstance(dtype, str):  # a name ("float32"), as some callers pass
        try:
            code = _dtype_by_type.get(np.dtype(dtype))
        except TypeError:
            return None
    return code


def describe(tensor, what="tensor"):
    """(dtype code, device, shape list) of an NDArray. The device is left to
    the C++ adapter, which reads it from the NDArray's context (the GPU's
    device id, CPU_DEVICE for host contexts) and checks storage type and that input,
    output and every tensor of a group share one device (cheaper there: this
    runs per tensor). Whether GPU tensors can run is the core's decision."""
    calls.check_array(tensor, what)
    code = code_of(tensor.dtype)
    if code is None:
        supported = sorted({"bfloat16" if t is BFLOAT16 else np.dtype(t).name for t in _dtype_by_type})
        raise TypeError(f"{what}: dtype {np.dtype(tensor.dtype).name} is not supported "
                        f"(use one of {supported})")
    return code, calls.core_module().CPU_DEVICE, list(tensor.shape)
