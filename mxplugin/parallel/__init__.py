"""Model parallelism for MXNet Gluon on mxplugin: differentiable collectives,
a dp x mp process mesh, tensor-parallel Dense layers and a softmax
cross-entropy over sharded classes. See docs/parallelism.md.

    import mxplugin as hvd
    from mxplugin import parallel

    hvd.init()
    mesh = parallel.ProcessMesh(dp=hvd.size() // 2, mp=2)
    net = mx.gluon.nn.Sequential()
    net.add(parallel.ColumnParallelDense(1024, 256, gather_output=False, activation="relu", mesh=mesh),
            parallel.RowParallelDense(256, 1024, input_is_parallel=True, mesh=mesh))
"""
from mxplugin.parallel.collectives import (allgather, allreduce, broadcast, copy_to_group, gather_from_group,
                                           reduce_from_group, reducescatter, scatter_to_group)
from mxplugin.parallel.layers import ColumnParallelDense, RowParallelDense
from mxplugin.parallel.loss import ShardedSoftmaxCrossEntropyLoss, sharded_accuracy, sharded_argmax
from mxplugin.parallel.mesh import (ProcessMesh, allreduce_gradients, broadcast_parameters, default_mesh,
                                    mark_distributed)

__all__ = ["allgather", "allreduce", "broadcast", "reducescatter", "copy_to_group", "reduce_from_group",
           "gather_from_group", "scatter_to_group", "ProcessMesh", "default_mesh", "mark_distributed",
           "broadcast_parameters", "allreduce_gradients", "ColumnParallelDense", "RowParallelDense",
           "ShardedSoftmaxCrossEntropyLoss", "sharded_argmax", "sharded_accuracy"]
