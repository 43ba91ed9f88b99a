"""The public API, imported whole by `import mxplugin` (mxplugin/__init__.py
says when it is loaded on first use instead)."""
try:
    from mxplugin._build_info import MXNET_BUILT as _MXNET_BUILT
except ImportError:  # not built yet, or built before core-only builds: the full API
    _MXNET_BUILT = True

from mxplugin.basics import (ProcessSet, add_process_set, ccl_built, cross_rank, cross_size, cuda_built,
                             ddl_built, gloo_built, gloo_enabled, global_process_set, init, is_initialized,
                             local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                             rank, remove_process_set, rocm_built, shutdown, size, start_timeline,
                             stop_timeline)
from mxplugin.errors import MismatchError, MXPluginError, NotInitializedError, PeerFailureError

__all__ = ["ProcessSet", "add_process_set", "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built",
           "gloo_built", "gloo_enabled", "global_process_set", "init", "is_initialized", "local_rank", "local_size",
           "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank", "remove_process_set",
           "rocm_built", "shutdown", "size", "start_timeline", "stop_timeline",
           "MismatchError", "MXPluginError", "NotInitializedError", "PeerFailureError"]

if _MXNET_BUILT:
    from mxplugin.training.compression import Compression
    from mxplugin.functions import allgather_object, broadcast_object, broadcast_parameters
    from mxplugin.training import kvstore as _kvstore  # noqa: F401  (registers kvstore="mxplugin")
    from mxplugin.training.optimizer import DistributedOptimizer
    from mxplugin.training.trainer import DistributedTrainer
    from mxplugin.training.join import join_when_done
    from mxplugin.training.sync_batchnorm import SyncBatchNorm, convert_sync_batchnorm
    from mxplugin.ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allreduce, allreduce_, alltoall,
                              barrier, broadcast, broadcast_, grouped_allgather, grouped_allreduce,
                              grouped_allreduce_, grouped_reducescatter, reducescatter)
    from mxplugin.joined import join
    from mxplugin import elastic

    __all__ += ["Compression", "allgather_object", "broadcast_object", "broadcast_parameters",
                "DistributedOptimizer", "DistributedTrainer", "Adasum", "Average", "Max", "Min", "Product", "Sum",
                "allgather", "allreduce", "allreduce_", "alltoall", "barrier", "broadcast", "broadcast_",
                "grouped_allgather", "grouped_allreduce", "grouped_allreduce_", "grouped_reducescatter",
                "join", "join_when_done", "reducescatter", "elastic", "SyncBatchNorm", "convert_sync_batchnorm"]
