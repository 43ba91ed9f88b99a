"""mxplugin: data-parallel distributed training for Apache MXNet Gluon.

A drop-in for horovod.mxnet (`import mxplugin as hvd`) on a C++ core that
fuses, scales and negotiates collectives in a background thread over MPI.

A core-only build (MXPLUGIN_WITH_MXNET=0, for machines without MXNet) offers
the start-up, topology and build queries of basics.py and the exceptions;
its core module is `mxplugin._loader.core_module`.
"""
import os as _os
import sys as _sys

__version__ = "0.1.0"


def _launcher_process():
    """Whether this process is the launcher itself (`python -m mxplugin.run`
    or the `mxplugin-run` script). It needs nothing of MXNet, whose import
    costs about 3 s of CPU per launch. Only interpreter options may come
    before `-m` (anything else is a script and its arguments); unsure means no."""
    if _sys.argv and _os.path.basename(_sys.argv[0]) == "mxplugin-run":
        return True
    argv = getattr(_sys, "orig_argv", [])
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[i + 1:i + 2] == ["mxplugin.run"]
        if not arg.startswith("-"):
            return False
    return False


if _launcher_process():
    def __getattr__(name):
        """The API on first use (PEP 562), should the launcher ask for it.
        `from mxplugin import <submodule>` asks here first too: submodule
        names are never the API, and must not load it."""
        import importlib
        import importlib.util

        if name.startswith("_") or importlib.util.find_spec(f"mxplugin.{name}") is not None:
            raise AttributeError(f"module 'mxplugin' has no attribute {name!r}")
        _api = importlib.import_module("mxplugin._api")
        if name not in _api.__all__:
            raise AttributeError(f"module 'mxplugin' has no attribute {name!r}")
        value = getattr(_api, name)
        globals()[name] = value
        return value
else:  # the whole API at import, kvstore="mxplugin" registered, as users expect
    from mxplugin._api import *  # noqa: F401,F403
