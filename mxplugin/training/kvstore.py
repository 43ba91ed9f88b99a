"""gluon.Trainer(params, ..., kvstore='mxplugin'): mxplugin through MXNet's own
KVStore plug-in mechanism (KVStoreBase.register). kvstore='horovod' and
mx.kv.create('horovod'), the name scripts written for Horovod's MXNet
kvstore use, give the same store.

MXNet's Trainer drops a kvstore given by name when a process has one device
and the name does not contain 'dist' (mxnet/model.py:_create_kvstore), which
would silently train every rank alone. Registering therefore also wraps the
Trainer's _create_kvstore so the names 'mxplugin' and 'horovod' always
yield this store.
"""
import mxnet as mx
from mxnet.kvstore import KVStoreBase

from mxplugin import basics
from mxplugin.errors import ArgumentError
from mxplugin.ops import Average, allreduce_, broadcast_
from mxplugin.training import sparse_rows


@KVStoreBase.register
class MXPlugin(KVStoreBase):
    """pushpull averages gradients across ranks; broadcast copies rank 0's value."""

    def __init__(self):
        if not basics.is_initialized():
            basics.init()

    def broadcast(self, key, value, out, priority=0):
        """Copies rank 0's `value` into `out` on every rank."""
        if basics.size() > 1:
            broadcast_(value, root_rank=0, name=f"kvstore.bcast.{key}", priority=priority)
        for o in (out if isinstance(out, (list, tuple)) else [out]):
            if o is not value:
                value.copyto(o)

    def pushpull(self, key, value, out=None, priority=0):
        """Averages `value` over the ranks (in place), then copies it into `out`."""
        values = value if isinstance(value, (list, tuple)) else [value]
        if len(values) != 1:
            raise ArgumentError("the mxplugin kvstore runs one device per process")
        if basics.size() > 1 and sparse_rows.is_row_sparse(values[0]):
            sparse_rows.reduce_in_place(values[0], f"kvstore.{key}", basics.global_process_set,
                                        1.0 / basics.size())
        elif basics.size() > 1:
            allreduce_(values[0], name=f"kvstore.{key}", op=Average, priority=priority)
        if out is not None:
            for o in (out if isinstance(out, (list, tuple)) else [out]):
                if o is not values[0]:
                    values[0].copyto(o)

    def push(self, key, value, priority=0):
        """gluon.Trainer pushes row_sparse gradients, then pulls them back
        (update_on_kvstore=False): the average over ranks happens here, in
        place (Note [Sparse gradients travel as rows] in sparse_rows.py)."""
        self.pushpull(key, value, priority=priority)

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        """The pushed gradients were averaged in place: nothing to fetch."""
        del key, out, priority, ignore_sparse

    @staticmethod
    def is_capable(capability):
        """No optional capability: the optimizer runs in the Trainer."""
        return False  # the optimizer runs in the Trainer, after pushpull

    @property
    def type(self):
        """The store's name."""
        return "mxplugin"

    @property
    def rank(self):
        """This process's rank."""
        return basics.rank()

    @property
    def num_workers(self):
        """The number of ranks."""
        return basics.size()

    def set_optimizer(self, optimizer):
        """Refused: the store does not update (update_on_kvstore=False)."""
        raise NotImplementedError("the mxplugin kvstore does not update on the store; "
                                  "use update_on_kvstore=False")

    def save_optimizer_states(self, fname, dump_optimizer=False):
        """Refused: optimizer states live in the Trainer."""
        raise NotImplementedError("optimizer states live in the Trainer (trainer.save_states)")

    def load_optimizer_states(self, fname):
        """Refused: optimizer states live in the Trainer."""
        raise NotImplementedError("optimizer states live in the Trainer (trainer.load_states)")


@KVStoreBase.register
class Horovod(MXPlugin):
    """kvstore='horovod': the mxplugin store under the name Horovod's MXNet
    kvstore has, for scripts written for it."""

    @property
    def type(self):
        """The store's name, as the script gave it."""
        return "horovod"


# The names gluon.Trainer is given for this store (lower case, as MXNet's registry keeps them).
NAMES = ("mxplugin", "horovod")


def _install_trainer_hook():
    import mxnet.gluon.trainer as gluon_trainer

    original = gluon_trainer._create_kvstore
    if getattr(original, "_mxplugin", False):
        return

    def create_kvstore(kvstore, num_device, arg_params):
        if isinstance(kvstore, str) and kvstore.lower() in NAMES:
            return mx.kvstore.create(kvstore.lower()), False
        return original(kvstore, num_device, arg_params)

    create_kvstore._mxplugin = True
    gluon_trainer._create_kvstore = create_kvstore

    # gluon.Trainer refuses any kvstore but its own C++ one when a gradient
    # is row_sparse ("Cannot use ... for multi-device training with sparse
    # gradients"), though with one device per process and
    # update_on_kvstore=False its loop (push the gradient, pull it back,
    # update) is what this store does: the dense weights' set-up is taken.
    original_init = gluon_trainer.Trainer._init_kvstore

    def init_kvstore(trainer):
        kvstore = trainer._kvstore_params.get("kvstore")
        sparse_grad = trainer._contains_sparse_grad
        if not (isinstance(kvstore, str) and kvstore.lower() in NAMES and sparse_grad
                and not trainer._contains_sparse_weight):
            return original_init(trainer)
        trainer._contains_sparse_grad = False
        try:
            return original_init(trainer)
        finally:
            trainer._contains_sparse_grad = sparse_grad

    gluon_trainer.Trainer._init_kvstore = init_kvstore


_install_trainer_hook()
