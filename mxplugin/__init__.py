"""mxplugin: data-parallel distributed training for Apache MXNet Gluon.

A drop-in for horovod.mxnet (`import mxplugin as hvd`) on a C++ core that
fuses, scales and negotiates collectives in a background thread over MPI.

A core-only build (MXPLUGIN_WITH_MXNET=0, for machines without MXNet) offers
the start-up, topology and build queries of basics.py and the exceptions;
its core module is `mxplugin._loader.core_module`.
"""
__version__ = "0.1.0"

from mxplugin._api import *  # noqa: F401,F403  (the whole API, kvstore="mxplugin" registered)
