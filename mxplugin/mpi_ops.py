"""horovod.mxnet's module layout: code that imports from
`horovod.mxnet.mpi_ops` runs with `mxplugin.mpi_ops` in its place. The same
objects as `mxplugin`'s own (not copies): the collectives of ops.py, the
reduce ops, and the start-up, topology and process-set functions."""
from mxplugin.basics import (ProcessSet, add_process_set, ccl_built, cross_rank, cross_size, cuda_built,
                             ddl_built, gloo_built, gloo_enabled, global_process_set, init, is_initialized,
                             local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                             rank, remove_process_set, rocm_built, shutdown, size, start_timeline,
                             stop_timeline)
from mxplugin.ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allreduce, allreduce_, alltoall,
                          barrier, broadcast, broadcast_, grouped_allgather, grouped_allreduce, grouped_allreduce_,
                          grouped_reducescatter, reducescatter)

__all__ = ["ProcessSet", "add_process_set", "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built",
           "gloo_built", "gloo_enabled", "global_process_set", "init", "is_initialized", "local_rank",
           "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank",
           "remove_process_set", "rocm_built", "shutdown", "size", "start_timeline", "stop_timeline",
           "Adasum", "Average", "Max", "Min", "Product", "Sum", "allgather", "allreduce", "allreduce_", "alltoall",
           "barrier", "broadcast", "broadcast_", "grouped_allgather", "grouped_allreduce", "grouped_allreduce_",
           "grouped_reducescatter", "reducescatter"]
