"""The build tells the truth: nccl_built(), cuda_built(), _build_info and
`mxplugin-run --check-build` agree with each other and with the libraries
actually loaded, the build followed the MXPLUGIN_WITH_* switches, and
build_support's NCCL discovery parses headers and honours its search order
(on fake installations in a temporary directory). No GPU needed, nothing
rebuilt."""
import ctypes
import os
import subprocess
import sys
import types

import pytest

import build_support
from mxplugin import _build_info
from mxplugin._loader import core_module as core
from mxplugin.errors import MXPluginError


def switch(name):
    return os.environ.get(name, "").strip().lower()


# -------------------------------------------------------- the built extension

def test_nccl_built_is_the_recorded_version_code():
    import mxplugin

    assert type(core.nccl_built()) is int
    assert core.nccl_built() == mxplugin.nccl_built() == _build_info.NCCL_BUILT


def test_nccl_build_info_is_consistent():
    """NCCL_BUILT is nonzero exactly when the build found a usable NCCL, and
    then says which; otherwise it says why not."""
    code = _build_info.NCCL_BUILT
    if code:
        assert code >= build_support.NCCL_MIN_VERSION_CODE
        assert _build_info.NCCL_VERSION == build_support.nccl_version_string(code)
        assert _build_info.NCCL_NOT_BUILT_REASON == ""
        assert _build_info.CUDA_BUILT, "NCCL is built only with CUDA"
        if _build_info.NCCL_INCLUDE:  # empty when the build ran in an isolated pip environment
            header = os.path.join(_build_info.NCCL_INCLUDE, "nccl.h")
            if os.path.exists(header):
                assert build_support.nccl_header_version(header) == code
    else:
        assert _build_info.NCCL_VERSION == _build_info.NCCL_LIBRARY == _build_info.NCCL_INCLUDE == ""
        assert _build_info.NCCL_NOT_BUILT_REASON
        if not _build_info.CUDA_BUILT and switch("MXPLUGIN_WITH_NCCL") != "0":
            assert _build_info.NCCL_NOT_BUILT_REASON == "CUDA is not built"


def test_nccl_build_followed_the_switch():
    flag = switch("MXPLUGIN_WITH_NCCL")
    if flag == "1":
        assert _build_info.NCCL_BUILT, "MXPLUGIN_WITH_NCCL=1 but the extension was built without NCCL"
    elif flag == "0":
        assert not _build_info.NCCL_BUILT, "MXPLUGIN_WITH_NCCL=0 but the extension was built with NCCL"
        assert _build_info.NCCL_NOT_BUILT_REASON == "MXPLUGIN_WITH_NCCL=0"


def test_loaded_nccl_reports_the_header_version():
    """The libnccl the extension runs with is there, and ncclGetVersion (no
    GPU needed) gives the version of the nccl.h it was compiled with."""
    if not _build_info.NCCL_BUILT:
        pytest.skip(f"built without NCCL ({_build_info.NCCL_NOT_BUILT_REASON})")
    from mxplugin._loader import NCCL_LIBRARY

    assert NCCL_LIBRARY and os.path.exists(NCCL_LIBRARY), "no libnccl.so.2 was preloaded"
    version = ctypes.c_int(0)
    assert ctypes.CDLL(NCCL_LIBRARY).ncclGetVersion(ctypes.byref(version)) == 0
    if os.path.realpath(NCCL_LIBRARY) == os.path.realpath(_build_info.NCCL_LIBRARY or NCCL_LIBRARY):
        assert version.value == _build_info.NCCL_BUILT
    else:  # another copy of the wheel (MXPLUGIN_NCCL_LIBRARY, or an isolated build): same major, not older
        assert version.value // 10000 == _build_info.NCCL_BUILT // 10000 and version.value >= _build_info.NCCL_BUILT


def test_mxnet_build_info_is_consistent():
    assert bool(_build_info.MXNET_VERSION) == _build_info.MXNET_BUILT
    flag = switch("MXPLUGIN_WITH_MXNET")
    if flag == "1":
        assert _build_info.MXNET_BUILT
    elif flag == "0":
        assert not _build_info.MXNET_BUILT


def test_core_only_build_runs_without_mxnet():
    """A core-only build imports without mxnet, and its MXNet entries fail
    saying so instead of touching the handles they are given."""
    if _build_info.MXNET_BUILT:
        pytest.skip("built with MXNet")
    out = subprocess.run([sys.executable, "-c", "import sys, mxplugin, mxplugin._loader; "
                          "print('mxnet' in sys.modules, mxplugin.nccl_built())"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", str(_build_info.NCCL_BUILT)]
    fake_array = types.SimpleNamespace(handle=ctypes.c_void_p(8))
    with pytest.raises(MXPluginError, match=r"built without MXNet \(MXPLUGIN_WITH_MXNET=0\)"):
        core.fused_update("sgd", fake_array, fake_array, [], {"lr": 0.1})


def check_build_lines(capsys):
    from mxplugin_run.run import main

    assert main(["--check-build"]) == 0
    return {line.split(":", 1)[0]: line for line in capsys.readouterr().out.splitlines() if ": " in line}


def test_check_build_agrees_with_build_info(capsys):
    lines = check_build_lines(capsys)
    from mxplugin._loader import MPI_LIBRARY, mpi_library_version
    from mxplugin_run.mpi_family import first_line

    # the library the ranks load, its version, and a launcher of the same MPI
    assert lines["MPI"].startswith(f"MPI: {first_line(mpi_library_version())} ({MPI_LIBRARY}); launcher: "), lines
    assert "MISMATCH" not in lines["MPI"], lines
    if _build_info.CUDA_BUILT:
        assert lines["CUDA"] == f"CUDA: yes (archs {_build_info.CUDA_ARCHS.replace(';', ', ')})"
    else:
        assert lines["CUDA"] == "CUDA: no"
    if _build_info.NCCL_BUILT:
        from mxplugin._loader import NCCL_LIBRARY

        assert lines["NCCL"] == f"NCCL: yes ({_build_info.NCCL_VERSION}, {NCCL_LIBRARY})"
    else:
        assert lines["NCCL"] == f"NCCL: no ({_build_info.NCCL_NOT_BUILT_REASON})"
    if _build_info.MXNET_BUILT:
        assert lines["MXNet"].startswith(f"MXNet: yes ({_build_info.MXNET_VERSION}")
    else:
        assert lines["MXNet"] == "MXNet: no (core-only build)"


# ------------------------------------------------------------ NCCL discovery

def fake_nccl(root, header="#define NCCL_VERSION_CODE 21805\n", library="lib/libnccl.so.2"):
    """An NCCL installation under `root`: include/nccl.h and an empty library."""
    os.makedirs(os.path.join(root, "include"), exist_ok=True)
    with open(os.path.join(root, "include", "nccl.h"), "w") as f:
        f.write(header)
    if library:
        os.makedirs(os.path.dirname(os.path.join(root, library)), exist_ok=True)
        open(os.path.join(root, library), "w").close()
    return str(root)


def version_header(major, minor, patch, code=None):
    text = f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
    return text + (f"#define NCCL_VERSION_CODE {code}\n" if code is not None else "")


@pytest.mark.parametrize("header, code, version", [
    ("#define NCCL_VERSION_CODE 21805\n", 21805, "2.18.5"),
    (version_header(2, 32, 3, code=23203), 23203, "2.32.3"),
    (version_header(2, 12, 12), 21212, "2.12.12"),  # no plain code: from MAJOR/MINOR/PATCH
    (version_header(2, 7, 8), 2708, "2.7.8"),       # NCCL < 2.9 numbering
    ("#  define NCCL_VERSION_CODE   21000  /* spaced */\n", 21000, "2.10.0"),
])
def test_header_version(tmp_path, header, code, version):
    fake_nccl(tmp_path, header)
    assert build_support.nccl_header_version(str(tmp_path / "include" / "nccl.h")) == code
    assert build_support.nccl_version_string(code) == version


def test_header_without_version_is_passed_over(tmp_path):
    fake_nccl(tmp_path / "a", "#define NCCL_H_\n")
    fake_nccl(tmp_path / "b")
    env = {"MXPLUGIN_NCCL_HOME": str(tmp_path / "a"), "NCCL_HOME": str(tmp_path / "b")}
    assert build_support.find_nccl(build_support.nccl_search_roots(env, package_dirs=[], system=False)).origin == \
        "$NCCL_HOME"


def wheel_site(root, header="#define NCCL_VERSION_CODE 23203\n"):
    """A site-packages dir holding the nvidia-nccl wheel's layout."""
    fake_nccl(os.path.join(root, "nvidia", "nccl"), header)
    return str(root)


def test_search_order(tmp_path):
    site_dir = wheel_site(tmp_path / "site")
    homes = {var: fake_nccl(tmp_path / var) for var in ("MXPLUGIN_NCCL_HOME", "NCCL_HOME", "NCCL_ROOT")}
    toolkit = fake_nccl(tmp_path / "cuda")

    def found(env):
        roots = build_support.nccl_search_roots(env, [os.path.join(toolkit, "include")], [site_dir], system=False)
        return build_support.find_nccl(roots)

    for var in ("MXPLUGIN_NCCL_HOME", "NCCL_HOME", "NCCL_ROOT"):
        nccl = found(homes)
        assert nccl.origin == f"${var}" and nccl.include_dir == os.path.join(homes[var], "include")
        assert nccl.library == os.path.join(homes[var], "lib", "libnccl.so.2")
        del homes[var]
    nccl = found({})
    assert nccl.origin == f"the nvidia-nccl wheel in {site_dir}" and nccl.version_code == 23203
    assert nccl.library == os.path.join(site_dir, "nvidia", "nccl", "lib", "libnccl.so.2")
    nccl = build_support.find_nccl(build_support.nccl_search_roots({}, [os.path.join(toolkit, "include")], [],
                                                                   system=False))
    assert nccl.origin == f"the CUDA toolkit at {toolkit}"
    assert build_support.find_nccl(build_support.nccl_search_roots({}, [], [], system=False)) is None


def test_library_forms(tmp_path):
    """lib64/, an unversioned libnccl.so and a fully versioned file all do;
    a header without any library does not."""
    for name, library in [("lib64", "lib64/libnccl.so.2"), ("plain", "lib/libnccl.so"),
                          ("versioned", "lib/libnccl.so.2.18.5")]:
        home = fake_nccl(tmp_path / name, library=library)
        nccl = build_support.find_nccl(build_support.nccl_search_roots({"NCCL_HOME": home}, [], [], system=False))
        assert nccl.library == os.path.join(home, library)
    home = fake_nccl(tmp_path / "headeronly", library=None)
    assert build_support.find_nccl(build_support.nccl_search_roots({"NCCL_HOME": home}, [], [], system=False)) is None


def configure(env, cuda=True, site_dirs=()):
    fake_cuda = {"nvcc": "nvcc", "include_dirs": [], "archs": ["80"], "cudart": ""} if cuda else None
    return build_support.nccl_config(env, fake_cuda, package_dirs=list(site_dirs), system=False)


def test_switch_and_version_requirements(tmp_path, capsys):
    site_dir = wheel_site(tmp_path / "site")
    old = fake_nccl(tmp_path / "old", version_header(2, 7, 8, code=2708))

    nccl, reason = configure({}, site_dirs=[site_dir])
    assert nccl.version == "2.32.3" and reason == ""
    assert configure({"MXPLUGIN_WITH_NCCL": "1"}, site_dirs=[site_dir])[0].version_code == 23203
    assert configure({"MXPLUGIN_WITH_NCCL": "0"}, site_dirs=[site_dir]) == (None, "MXPLUGIN_WITH_NCCL=0")
    assert configure({}, cuda=False, site_dirs=[site_dir]) == (None, "CUDA is not built")
    assert configure({}) == (None, "NCCL not found")
    nccl, reason = configure({"NCCL_HOME": old}, site_dirs=[site_dir])  # the first found decides
    assert nccl is None and reason == "NCCL 2.7.8 from $NCCL_HOME is older than 2.14"
    assert "building without NCCL" in capsys.readouterr().err

    for env, cuda, site_dirs, message in [
        ({"MXPLUGIN_WITH_NCCL": "1"}, False, [site_dir], "needs the CUDA build"),
        ({"MXPLUGIN_WITH_NCCL": "1"}, True, [], "NCCL not found"),
        ({"MXPLUGIN_WITH_NCCL": "1", "NCCL_HOME": old}, True, [site_dir], "older than 2.14"),
        # an explicit home that is wrong is an error, not a reason to look elsewhere
        ({"MXPLUGIN_NCCL_HOME": str(tmp_path / "missing")}, True, [site_dir],
         "MXPLUGIN_NCCL_HOME=.*has no include/nccl.h"),
        ({"MXPLUGIN_WITH_NCCL": "yes"}, True, [site_dir], "MXPLUGIN_WITH_NCCL='yes'"),
    ]:
        with pytest.raises(SystemExit, match=message):
            configure(env, cuda, site_dirs)
