"""CUDA scale and copy kernels (cuda/scale_kernels.cu) through the raw
device-pointer entries of mxplugin._core (cuda_scale, cuda_copy_and_scale,
cuda_batched_copy), driven with CuPy arrays.

Every kernel is checked against a float64 reference on fresh random inputs
(the seed is in every failure message), for every dtype, odd sizes and
pointers offset by a few elements from the allocation (so source and
destination are misaligned, alike or differently), on a non-default stream;
elements around each written range must stay untouched. Floating-point
results must also equal the CPU path's arithmetic (src/common/scale.cc) bit for bit.

Tests marked `gpu` skip, saying why, without CuPy, a GPU or a CUDA build.
test_cuda_build_matches_toolkit runs everywhere.
"""
import os
import shutil

import numpy as np
import pytest

from gpu_probe import no_gpu_reason
from mxplugin import _build_info
from mxplugin._loader import core_module as core
from mxplugin.errors import MXPluginError

DTYPES = ["float16", "bfloat16", "float32", "float64", "uint8", "int8", "int32", "int64"]
FLOATS = {"float16", "bfloat16", "float32", "float64"}
# |got - ref| <= REL[dtype] * |ref| + ABS[dtype] against the float64 reference:
# the dtype's rounding of the product, plus float32's rounding of the scale
# and the product for the half types and float32.
REL = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -22, "float64": 2.0 ** -51}
ABS = {"float16": 2.0 ** -24, "bfloat16": 1e-38, "float32": 1e-44, "float64": 1e-300}
SIZES = [1, 7, 33, 1001, 65537, (1 << 20) + 3]
# (source, destination) element offsets from a 256-byte aligned allocation.
OFFSETS = [(0, 0), (1, 1), (3, 3), (0, 1), (1, 0), (5, 2)]
SCALES = [0.37, 1.0]
GUARD = 16  # elements around every written range that must keep their value


def cuda_requested():
    return os.environ.get("MXPLUGIN_WITH_CUDA", "").strip().lower()


def test_cuda_build_matches_toolkit():
    """cuda_built() tells the truth about the build, the build followed
    MXPLUGIN_WITH_CUDA / the presence of nvcc, and without a usable GPU every
    kernel entry raises a Python exception that says why."""
    built = core.cuda_built()
    assert built == _build_info.CUDA_BUILT
    assert built == bool(_build_info.NVCC)
    flag = cuda_requested()
    if flag == "1":
        assert built, "MXPLUGIN_WITH_CUDA=1 but the extension was built without CUDA"
    elif flag == "0":
        assert not built, "MXPLUGIN_WITH_CUDA=0 but the extension was built with CUDA"
    elif shutil.which("nvcc"):
        assert built, f"nvcc is on PATH ({shutil.which('nvcc')}) but the extension was built without CUDA"

    if core.cuda_device_count() > 0:
        return  # a GPU is here: the gpu tests below exercise the kernels
    calls = [
        lambda: core.cuda_scale(0x1000, 10, "float32", 0.5),
        lambda: core.cuda_copy_and_scale(0x1000, 0x2000, 10, "float16", 2.0),
        lambda: core.cuda_batched_copy([(0x1000, 0x2000, 10, 1.0)], "float64"),
        lambda: core.cuda_synchronize(),
    ]
    expected = "no CUDA device is available" if built else "built without CUDA"
    for call in calls:
        with pytest.raises(MXPluginError, match=expected):
            call()
    with pytest.raises(ValueError, match="unknown dtype"):
        core.cuda_scale(0x1000, 10, "complex64", 0.5)


@pytest.mark.skipif(not core.cuda_built(), reason="mxplugin was built without CUDA")
def test_misaligned_pointers_are_refused_before_any_launch():
    """A pointer not aligned to its element size would make the kernel fault
    and lose the CUDA context: refused, naming the copy and the pointer,
    before the device is asked (so this runs without a GPU too)."""
    calls = [
        (lambda: core.cuda_scale(0x1002, 10, "float32", 0.5), "copy 0 source: 0x1002 is not aligned to float32's 4"),
        (lambda: core.cuda_copy_and_scale(0x2001, 0x1000, 10, "float16", 2.0),
         "copy 0 destination: 0x2001 is not aligned to float16's 2"),
        (lambda: core.cuda_batched_copy([(0x1000, 0x2000, 10, 1.0), (0x1004, 0x2000, 3, 1.0)], "float64"),
         "copy 1 destination: 0x1004 is not aligned to float64's 8"),
    ]
    for call, message in calls:
        with pytest.raises(ValueError, match=message):
            call()


# --- GPU tests

gpu = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    if no_gpu_reason():
        pytest.skip(no_gpu_reason())
    cupy = pytest.importorskip("cupy", reason="the GPU tests drive the kernels with CuPy, which is not installed")
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        pytest.skip(f"no CUDA device: {exc}")
    if devices == 0:
        pytest.skip("no CUDA device")
    if not core.cuda_built():
        pytest.skip("mxplugin was built without CUDA (no nvcc at build time, or MXPLUGIN_WITH_CUDA=0)")
    return cupy


@pytest.fixture
def stream(cp):
    s = cp.cuda.Stream(non_blocking=True)
    yield s
    s.synchronize()


class SeededGenerator(np.random.Generator):
    """A fresh random generator that remembers its seed for failure messages."""

    def __init__(self):
        self.seed = int.from_bytes(os.urandom(4), "little")
        super().__init__(np.random.PCG64(self.seed))


@pytest.fixture
def rng():
    return SeededGenerator()


def float_to_bfloat16_bits(values):
    """Round to nearest even, as __float2bfloat16_rn (finite inputs)."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bfloat16_bits_to_float(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def storage_dtype(dtype):
    return np.uint16 if dtype == "bfloat16" else np.dtype(dtype)


def random_values(dtype, n, rng):
    """n values of `dtype` (bfloat16 as its uint16 bits) that scale without overflow."""
    if dtype == "bfloat16":
        return float_to_bfloat16_bits(rng.standard_normal(n) * 3)
    if dtype in FLOATS:
        return (rng.standard_normal(n) * 3).astype(dtype)
    info = np.iinfo(dtype)
    low, high = max(info.min, -(1 << 40)), min(info.max, 1 << 40)
    return rng.integers(low, high, n, dtype=dtype, endpoint=True)


def as_float64(dtype, values):
    if dtype == "bfloat16":
        return bfloat16_bits_to_float(values).astype(np.float64)
    return np.asarray(values).astype(np.float64)


def cpu_arithmetic(dtype, values, scale):
    """The CPU path's result (src/common/scale.cc): half types and float32 in float32."""
    if dtype == "bfloat16":
        return float_to_bfloat16_bits(bfloat16_bits_to_float(values) * np.float32(scale))
    if dtype in ("float16", "float32"):
        return (values.astype(np.float32) * np.float32(scale)).astype(dtype)
    return values * np.float64(scale)


def saturated(dtype, values):
    """Integers scale in float64, truncated toward zero and saturated to the
    type's range, NaN giving 0 (src/common/saturate.h: CPU and GPU alike)."""
    info = np.iinfo(dtype)
    v = np.trunc(np.asarray(values, dtype=np.float64))
    out = np.zeros(v.shape, dtype=dtype)
    out[v <= info.min] = info.min
    out[v >= float(info.max)] = info.max
    inside = (v > info.min) & (v < float(info.max))
    out[inside] = v[inside].astype(dtype)
    return out


def check_result(dtype, got, source, scale, what):
    ref = as_float64(dtype, source) * scale
    if dtype not in FLOATS:
        np.testing.assert_array_equal(got, saturated(dtype, ref), err_msg=what)
        return
    err = np.abs(as_float64(dtype, got) - ref)
    bound = REL[dtype] * np.abs(ref) + ABS[dtype]
    worst = int(np.argmax(err - bound))
    assert err[worst] <= bound[worst], (f"{what}: element {worst}: got {as_float64(dtype, got)[worst]!r}, "
                                        f"float64 reference {ref[worst]!r}")
    np.testing.assert_array_equal(got, cpu_arithmetic(dtype, source, scale), err_msg=what + " (CPU arithmetic)")


class Buffer:
    """A device allocation with GUARD elements of random values around
    [offset, offset + n), and its host copy."""

    def __init__(self, cp, dtype, n, offset, rng):
        self.dtype, self.n, self.offset = dtype, n, offset
        self.host = random_values(dtype, offset + n + GUARD, rng)
        self.device = cp.asarray(self.host)
        self.ptr = self.device.data.ptr + offset * self.device.itemsize

    def view(self):
        return self.device[self.offset:self.offset + self.n].get()

    def check_guards(self, what):
        now = self.device.get()
        np.testing.assert_array_equal(now[:self.offset], self.host[:self.offset], err_msg=what + ": before the range")
        np.testing.assert_array_equal(now[self.offset + self.n:], self.host[self.offset + self.n:],
                                      err_msg=what + ": after the range")


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_scale_in_place(cp, stream, rng, dtype, offset):
    for size in SIZES:
        buf = Buffer(cp, dtype, size, offset, rng)
        source = buf.host[offset:offset + size].copy()
        cp.cuda.get_current_stream().synchronize()
        core.cuda_scale(buf.ptr, size, dtype, 0.37, stream.ptr)
        stream.synchronize()
        what = f"scale {dtype} n={size} offset={offset} seed={rng.seed}"
        check_result(dtype, buf.view(), source, 0.37, what)
        buf.check_guards(what)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("offsets", OFFSETS)
def test_copy_and_scale(cp, stream, rng, dtype, offsets):
    for size in SIZES:
        for scale in SCALES:
            src = Buffer(cp, dtype, size, offsets[0], rng)
            dst = Buffer(cp, dtype, size, offsets[1], rng)
            cp.cuda.get_current_stream().synchronize()
            core.cuda_copy_and_scale(dst.ptr, src.ptr, size, dtype, scale, stream.ptr)
            stream.synchronize()
            what = f"copy-and-scale {dtype} n={size} offsets={offsets} scale={scale} seed={rng.seed}"
            check_result(dtype, dst.view(), src.view(), scale, what)
            dst.check_guards(what)
            np.testing.assert_array_equal(src.device.get(), src.host, err_msg=what + ": source changed")


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_copy_into_and_out_of_fusion_buffer(cp, stream, rng, dtype):
    """1250 tensors of odd sizes (more than two launches at either capacity,
    64 or 600 descriptors: Note [Descriptors per launch]), packed back to back
    into one buffer (so most land misaligned) with per-tensor prescales, some
    1, then unpacked with postscales into fresh tensors."""
    sizes = [int(s) for s in rng.integers(1, 2000, 1250)]
    sizes[::17] = [1] * len(sizes[::17])
    sizes[5] = 300_001
    tensors = [Buffer(cp, dtype, n, int(rng.integers(0, 4)), rng) for n in sizes]
    prescales = [1.0 if i % 3 == 0 else float(rng.uniform(0.1, 2.0)) for i in range(len(sizes))]
    postscales = [1.0 if i % 4 == 0 else float(rng.uniform(0.1, 2.0)) for i in range(len(sizes))]
    fusion = Buffer(cp, dtype, sum(sizes), 1, rng)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    itemsize = fusion.device.itemsize
    what = f"batched {dtype} seed={rng.seed}"

    cp.cuda.get_current_stream().synchronize()
    core.cuda_batched_copy([(fusion.ptr + int(a) * itemsize, t.ptr, t.n, s)
                            for t, a, s in zip(tensors, starts, prescales)], dtype, stream.ptr)
    stream.synchronize()
    packed = fusion.view()
    for i, (t, a, s) in enumerate(zip(tensors, starts, prescales)):
        check_result(dtype, packed[a:a + t.n], t.view(), s, f"{what}: into buffer, tensor {i}")
    fusion.check_guards(what + ": fusion buffer")

    outputs = [Buffer(cp, dtype, n, int(rng.integers(0, 4)), rng) for n in sizes]
    cp.cuda.get_current_stream().synchronize()
    core.cuda_batched_copy([(o.ptr, fusion.ptr + int(a) * itemsize, o.n, s)
                            for o, a, s in zip(outputs, starts, postscales)], dtype, stream.ptr)
    stream.synchronize()
    for i, (o, a, s) in enumerate(zip(outputs, starts, postscales)):
        check_result(dtype, o.view(), packed[a:a + o.n], s, f"{what}: out of buffer, tensor {i}")
        o.check_guards(f"{what}: out of buffer, tensor {i}")


@gpu
def test_scale_beyond_one_launch_of_blocks(cp, stream):
    """A tensor larger than one block range covers (1 GiB: 65536 blocks of
    16 KiB) is finished by the blocks' strided loop."""
    n = (1 << 28) + 4 * 16384 + 5
    x = cp.arange(n, dtype=cp.float32) % 1000 + 0.5
    cp.cuda.get_current_stream().synchronize()
    core.cuda_scale(x.data.ptr + 4, n - 1, "float32", 0.25, stream.ptr)
    stream.synchronize()
    expected = cp.arange(n, dtype=cp.float32) % 1000 + 0.5
    expected[1:] *= 0.25
    assert bool(cp.array_equal(x, expected))


@gpu
def test_argument_errors(cp):
    x = cp.zeros(16, cp.float32)
    host = np.zeros(16, np.float32)
    with pytest.raises(ValueError, match="host memory"):
        core.cuda_scale(host.ctypes.data, 16, "float32", 2.0)
    with pytest.raises(ValueError, match="host memory"):
        core.cuda_copy_and_scale(x.data.ptr, host.ctypes.data, 16, "float32", 2.0)
    with pytest.raises(ValueError, match="negative count"):
        core.cuda_batched_copy([(x.data.ptr, x.data.ptr, -1, 2.0)], "float32")
    with pytest.raises(ValueError, match="not aligned to float32's 4-byte elements"):
        core.cuda_scale(x.data.ptr + 2, 8, "float32", 2.0)
    with pytest.raises(ValueError, match="unknown dtype"):
        core.cuda_scale(x.data.ptr, 16, "complex64", 2.0)
    core.cuda_scale(x.data.ptr, 0, "float32", 2.0)  # nothing to do
    core.cuda_batched_copy([], "float32")
    core.cuda_synchronize()


@gpu
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "int64"])
def test_integer_scaling_saturates_at_the_limits(cp, stream, dtype):
    """The same values and factors as the CPU path's check (check_raw_core.py):
    products beyond the type's range clamp to it, NaN gives 0."""
    info = np.iinfo(dtype)
    values = np.array([info.max, info.min, info.max // 2, (info.min // 2) if info.min else 3, 5, 0, 1], dtype=dtype)
    for factor in (4.0, -3.5, 0.5, float("nan")):
        src = cp.asarray(values)
        dst = cp.zeros_like(src)
        core.cuda_copy_and_scale(dst.data.ptr, src.data.ptr, values.size, dtype, factor, stream.ptr)
        stream.synchronize()
        np.testing.assert_array_equal(dst.get(), saturated(dtype, values.astype(np.float64) * factor),
                                      err_msg=f"{dtype} x {factor}")
