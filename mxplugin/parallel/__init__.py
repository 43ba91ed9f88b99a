"""Model parallelism for MXNet Gluon on mxplugin: differentiable collectives,
a dp x mp process mesh, tensor-parallel Dense and Embedding layers, a softmax
cross-entropy over sharded classes, and a partitioner that splits an existing
serial network (parallelize, with placements or an automatic plan) and
gathers it back into a serial checkpoint. In short (the guide, Tensor
parallelism, says more)::

    import mxnet as mx
    import mxplugin as hvd
    from mxplugin import parallel

    hvd.init()
    mesh = parallel.ProcessMesh(dp=hvd.size() // 2, mp=2)
    net = mx.gluon.nn.Sequential()
    net.add(parallel.ColumnParallelDense(1024, 256, gather_output=False, activation="relu", mesh=mesh),
            parallel.RowParallelDense(256, 1024, input_is_parallel=True, mesh=mesh))

    # or split an existing serial network
    parallel.parallelize(serial_net, mesh, {"0": parallel.ColwiseParallel(), "2": parallel.RowwiseParallel()})
"""
from mxplugin.parallel.collectives import (allgather, allreduce, broadcast, copy_to_group, gather_from_group,
                                           reduce_from_group, reducescatter, scatter_to_group)
from mxplugin.parallel.embedding import VocabParallelEmbedding
from mxplugin.parallel.gather import gather_serial_parameters, load_serial_parameters, save_serial_parameters
from mxplugin.parallel.layers import ColumnParallelDense, RowParallelDense
from mxplugin.parallel.loss import ShardedSoftmaxCrossEntropyLoss, sharded_accuracy, sharded_argmax
from mxplugin.parallel.mesh import (ProcessMesh, allreduce_gradients, broadcast_parameters, default_mesh,
                                    mark_distributed)
from mxplugin.parallel.partition import Plan, parallelize
from mxplugin.parallel.placements import (ColwiseParallel, HeadParallel, Placement, Replicate, RowwiseParallel,
                                          ShardedOutput, VocabParallel)
from mxplugin.parallel.plan_auto import auto_plan

__all__ = ["allgather", "allreduce", "broadcast", "reducescatter", "copy_to_group", "reduce_from_group",
           "gather_from_group", "scatter_to_group", "ProcessMesh", "default_mesh", "mark_distributed",
           "broadcast_parameters", "allreduce_gradients", "ColumnParallelDense", "RowParallelDense",
           "VocabParallelEmbedding", "ShardedSoftmaxCrossEntropyLoss", "sharded_argmax", "sharded_accuracy",
           "parallelize", "auto_plan", "Plan", "Placement", "ColwiseParallel", "RowwiseParallel", "ShardedOutput",
           "VocabParallel", "HeadParallel", "Replicate", "gather_serial_parameters", "save_serial_parameters",
           "load_serial_parameters"]
