"""The two kinds of dense MXNet array users hand us: legacy NDArrays
(`mx.nd`) and the NumPy interface's (`mx.np.ndarray`, under
`npx.set_np()`).

Note [Array kinds]: an `mx.np.ndarray` is an NDArray subclass over the same
kind of MXNet array, but MXNet's legacy operators refuse it ("a legacy
operator which can only accept legacy ndarrays") and the NumPy interface's
refuse legacy arrays. mxplugin's collectives, trainer and optimizers run
legacy operators throughout, so every entry takes a legacy view of a NumPy
array (`as_nd_ndarray()`: a shallow copy, the same memory and the same
engine variable, so dependencies and in-place writes are the caller's
array's) and hands results back in the caller's kind (`as_np_ndarray()`,
again no copy). Legacy arrays pass through untouched: the legacy path costs
one isinstance check per array."""
import mxnet as mx

_numpy_ndarray = mx.np.ndarray


def is_numpy(array):
    """Whether `array` is a NumPy-interface array (mx.np.ndarray)."""
    return isinstance(array, _numpy_ndarray)


def legacy(array):
    """A legacy NDArray over the same memory as `array` (itself when it is one already)."""
    return array.as_nd_ndarray() if isinstance(array, _numpy_ndarray) else array


def legacy_list(arrays):
    """legacy() of each array of a list; the same list when none is a NumPy array."""
    if any(isinstance(a, _numpy_ndarray) for a in arrays):
        return [legacy(a) for a in arrays]
    return arrays


def like(template, result):
    """`result` (a legacy NDArray, or a list or tuple of them, or None) in
    the kind of `template`: NumPy-interface arrays when `template` is one."""
    if not isinstance(template, _numpy_ndarray) or result is None:
        return result
    if isinstance(result, (list, tuple)):
        return type(result)(like(template, r) for r in result)
    return result if isinstance(result, _numpy_ndarray) else result.as_np_ndarray()


def like_each(templates, results):
    """Each result in the kind of the template at its position."""
    if not any(isinstance(t, _numpy_ndarray) for t in templates):
        return results
    return [like(t, r) for t, r in zip(templates, results)]
