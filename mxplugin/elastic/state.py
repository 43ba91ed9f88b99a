"""What an elastic job keeps across worlds: State and its kinds.

A state is committed in memory (`commit()`): a copy the ranks can go back
to (`restore()`) when a peer fails mid-step. When a world ends, its ranks
hand the committed copy to the launcher (mxplugin.elastic.runner), and the
next world's rank 0 starts from the newest copy and gives it to every rank
(`sync()`)."""
import copy
import os
import pickle
import tempfile
import threading

import mxnet as mx

import mxplugin as hvd
from mxplugin.elastic import client as _client


class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank at commit() when the launcher has found a change
    in the hosts: `mxplugin.elastic.run` then ends this world so that the
    launcher can start one with the new hosts, from the state just
    committed."""


class State:
    """Base of the elastic states. Subclasses implement save() (copy the
    current values aside), restore() (go back to the copy), sync() (give
    rank 0's current values to every rank), and dumps()/loads() of the
    committed copy."""

    def __init__(self):
        self._reset_callbacks = []
        self.commits = 0  # commit() calls that this state's values have gone through
        # Held while the committed copy changes or is read: the runner's
        # watcher thread may hand it over while the training thread commits.
        self.lock = threading.RLock()

    def register_reset_callbacks(self, callbacks):
        """Functions called with no arguments after every reset, once the
        state is restored in the new world (to set the learning rate for the
        new size, say)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Keeps the current values as the ones to go back to (in memory; also
        written to the launcher's --checkpoint-path by rank 0 when it gave
        one), then checks for changed hosts (check_host_updates)."""
        with self.lock:
            self.commits += 1
            self.save()
            data = self.dumps() if _client.checkpoint_path() and hvd.rank() == 0 else None
        if data is not None:
            write_checkpoint(_client.checkpoint_path(), self.commits, data)
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the launcher's
        hosts changed (rank 0 asks the launcher; the answer is broadcast, so
        all ranks agree). Does nothing outside an elastic launch."""
        client = _client.driver()
        if client is None:
            return
        updated = client.hosts_updated() if hvd.rank() == 0 else None
        if hvd.broadcast_object(updated, root_rank=0, name="mxplugin.elastic.hosts_updated"):
            raise HostsUpdatedInterrupt("the launcher's hosts changed")

    def commits_saved(self):
        """The commit count of the committed copy."""
        return self.commits

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def dumps(self):
        """The committed copy, as bytes."""
        raise NotImplementedError

    def loads(self, data):
        """Makes `data` (from dumps()) the committed copy and restores it."""
        raise NotImplementedError


class ObjectState(State):
    """Plain Python values kept as attributes: ObjectState(epoch=0, batch=0);
    state.epoch += 1. Each must be picklable."""

    def __init__(self, **values):
        super().__init__()
        self._names = sorted(values)
        for name, value in values.items():
            setattr(self, name, value)
        self._saved = None
        ObjectState.save(self)

    def _values(self):
        return {name: getattr(self, name) for name in self._names}

    def save(self):
        self._saved = (self.commits, copy.deepcopy(self._values()))

    def commits_saved(self):
        return self._saved[0]

    def restore(self):
        self.commits, values = self._saved
        for name, value in copy.deepcopy(values).items():
            setattr(self, name, value)

    def sync(self):
        commits, values = hvd.broadcast_object((self.commits, self._values()), root_rank=0,
                                               name="mxplugin.elastic.objects")
        self.commits = commits
        for name, value in values.items():
            setattr(self, name, value)
        ObjectState.save(self)

    def dumps(self):
        return pickle.dumps({"objects": self._saved})

    def loads(self, data):
        self._saved = pickle.loads(data)["objects"]
        ObjectState.restore(self)


class GluonState(ObjectState):
    """A Gluon block's parameters, a trainer's optimizer states (and its
    optimizer: learning rate, update count) and plain values:
    GluonState(net, trainer, epoch=0, batch=0)."""

    def __init__(self, net, trainer, **values):
        self.net, self.trainer = net, trainer
        self._saved_params = self._saved_trainer = None
        super().__init__(**values)
        self.save()

    def _params(self):
        # Structural names ("0.weight"), the same in every process that
        # builds the same block, unlike the global-counter prefixes.
        return self.net._collect_params_with_prefix()

    def save(self):
        super().save()
        self._saved_params = {name: p.data().asnumpy() for name, p in self._params().items()}
        self._saved_trainer = trainer_states(self.trainer)

    def restore(self):
        super().restore()
        for name, p in self._params().items():
            p.set_data(mx.nd.array(self._saved_params[name], dtype=p.dtype))
        load_trainer_states(self.trainer, self._saved_trainer)

    def sync(self):
        hvd.broadcast_parameters(self._params(), root_rank=0, prefix="mxplugin.elastic.")
        blob = hvd.broadcast_object(trainer_states(self.trainer) if hvd.rank() == 0 else None, root_rank=0,
                                    name="mxplugin.elastic.trainer")
        load_trainer_states(self.trainer, blob)
        super().sync()
        self._saved_params = {name: p.data().asnumpy() for name, p in self._params().items()}
        self._saved_trainer = blob

    def dumps(self):
        return pickle.dumps({"objects": self._saved, "params": self._saved_params, "trainer": self._saved_trainer})

    def loads(self, data):
        loaded = pickle.loads(data)
        self._saved, self._saved_params, self._saved_trainer = loaded["objects"], loaded["params"], loaded["trainer"]
        missing = sorted(set(self._params()) - set(self._saved_params))
        if missing:
            raise ValueError(f"the handed-over state has no values for parameters {', '.join(missing[:5])}: "
                             "was it made by the same network?")
        self.restore()


def trainer_states(trainer):
    """The trainer's optimizer and optimizer states, as bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "states")
        trainer.save_states(path)
        with open(path, "rb") as f:
            return f.read()


def load_trainer_states(trainer, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "states")
        with open(path, "wb") as f:
            f.write(data)
        trainer.load_states(path)


def write_checkpoint(path, commits, data):
    """Writes atomically: a rank killed while writing leaves the last whole one."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(pickle.dumps((commits, data)))
    os.replace(tmp, path)


def read_checkpoint(path):
    """(commits, data) or None."""
    try:
        with open(path, "rb") as f:
            return pickle.loads(f.read())
    except FileNotFoundError:
        return None
