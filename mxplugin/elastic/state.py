"""What an elastic job keeps across worlds: State and its kinds.

A state is committed in memory (`commit()`): a copy the ranks can go back
to (`restore()`) when a peer fails mid-step. When a world ends, its ranks
hand the committed copy to the launcher (mxplugin.elastic.runner), and the
next world's rank 0 starts from the newest copy and gives it to every rank
(`sync()`).

The committed copy is one snapshot (a dict) built whole, then swapped in
under the state's lock: the runner's watcher thread may hand it over at
any moment, and a commit cut short (a peer failing while the parameters
are copied) must leave the previous snapshot, not a mix labelled new."""
import copy
import os
import pickle
import tempfile
import threading

import mxnet as mx

import mxplugin as hvd
from mxplugin import array_kinds
from mxplugin.errors import ArgumentError
import mxplugin.elastic.client as _client
from mxplugin.elastic import _reference


class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank at commit() when the launcher has found a change
    in the hosts: ``mxplugin.elastic.run`` then ends this world so that the
    launcher can start one with the new hosts, from the state just
    committed."""

    def __init__(self, message="the launcher's hosts changed", skip_sync=False):
        super().__init__(message)
        self.skip_sync = skip_sync


class State:
    """Base of the elastic states. A subclass implements snapshot(commits)
    (a picklable dict of copies of the current values, with "commits"),
    apply(snapshot) (make the current values the snapshot's) and sync()
    (give rank 0's current values to every rank, then save())."""

    def __init__(self):
        self._reset_callbacks = []
        self.commits = 0  # commit() calls that this state's values have gone through
        self.lock = threading.RLock()  # held while the committed snapshot is swapped or read
        self._saved = None

    def register_reset_callbacks(self, callbacks):
        """Functions called with no arguments after every reset, once the
        state is restored and synced in the new world (to set the learning
        rate for the new size, say)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Runs the callbacks of register_reset_callbacks(), in order: run()
        calls it after a reset, once the state is the restored one."""
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Keeps the current values as the ones to go back to (in memory; also
        written to the launcher's --checkpoint-path by rank 0 when it gave
        one), then checks for changed hosts (check_host_updates)."""
        snapshot = self.snapshot(self.commits + 1)  # may fail (a lost peer): nothing changes then
        with self.lock:
            self._saved = snapshot
            self.commits = snapshot["commits"]
        path = _client.checkpoint_path()
        if path and hvd.rank() == 0:
            write_checkpoint(path, self.commits, pickle.dumps(snapshot))
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
            raise HostsUpdatedInterrupt()

    def save(self):
        """Takes the current values as the committed snapshot (no new commit)."""
        snapshot = self.snapshot(self.commits)
        with self.lock:
            self._saved = snapshot

    def restore(self):
        """Goes back to the committed snapshot."""
        with self.lock:
            snapshot = self._saved
        self.apply(snapshot)
        self.commits = snapshot["commits"]

    def commits_saved(self):
        """How many commits the saved snapshot holds (the count restore() goes back to)."""
        with self.lock:
            return self._saved["commits"]

    def dumps(self):
        """The committed snapshot, as bytes."""
        with self.lock:
            return pickle.dumps(self._saved)

    def loads(self, data):
        """Makes `data` (from dumps()) the committed snapshot and restores it."""
        snapshot = pickle.loads(data)
        self.check_snapshot(snapshot)
        with self.lock:
            self._saved = snapshot
        self.restore()

    def check_snapshot(self, snapshot):
        """Raises ValueError when `snapshot` cannot be applied to this state."""

    def snapshot(self, commits):
        """A picklable dict of copies of the current values, with "commits":
        what commit() saves and dumps() writes."""
        raise NotImplementedError

    def apply(self, snapshot):
        """Makes the current values those of `snapshot` (restore(), loads())."""
        raise NotImplementedError

    def sync(self):
        """Makes every rank's values rank 0's: a collective, which run() makes
        at the start of every world."""
        raise NotImplementedError


class ObjectState(State):
    """Plain Python values kept as attributes: ObjectState(epoch=0, batch=0);
    state.epoch += 1. Each must be picklable."""

    def __init__(self, **values):
        super().__init__()
        taken = sorted(name for name in values if name.startswith("_") or hasattr(self, name))
        if taken:
            raise ArgumentError(f"{type(self).__name__}: {', '.join(taken)} would replace the state's own "
                                "attribute or method of that name; name the value otherwise")
        self._names = sorted(values)
        for name, value in values.items():
            setattr(self, name, value)
        self.save()

    def _values(self):
        return {name: getattr(self, name) for name in self._names}

    def snapshot(self, commits):
        """Deep copies of the values, with the commit count."""
        return {"commits": commits, "objects": copy.deepcopy(self._values())}


    def apply(self, snapshot):
        """Sets the values of `snapshot` as attributes."""
        for name, value in copy.deepcopy(snapshot["objects"]).items():
            setattr(self, name, value)

    def sync(self):
        """Rank 0's values and commit count on every rank (one object broadcast)."""
        commits, values = hvd.broadcast_object((self.commits, self._values()), root_rank=0,
                                               name="mxplugin.elastic.objects")
        self.commits = commits
        for name, value in values.items():
            setattr(self, name, value)
        self.save()


class GluonState(ObjectState):
    """A Gluon block's parameters, a trainer's optimizer states (and its
    optimizer: learning rate, update count) and plain values:
    GluonState(net, trainer, epoch=0, batch=0)."""

    def __init__(self, net, trainer, **values):
        self.net, self.trainer = net, trainer
        self._applied_trainer = None  # the trainer states last applied from a snapshot
        super().__init__(**values)

    def _params(self):
        # Structural names ("0.weight"), the same in every process that
        # builds the same block, unlike the global-counter prefixes.
        return self.net._collect_params_with_prefix()

    def snapshot(self, commits):
        """The values, the parameters' and the trainer's states, copied."""
        snapshot = super().snapshot(commits)
        snapshot["params"] = {name: p.data().asnumpy() for name, p in self._params().items()}
        snapshot["trainer"] = trainer_states(self.trainer)
        return snapshot

    def apply(self, snapshot):
        """The values, the parameters and the trainer's states of `snapshot`."""
        super().apply(snapshot)
        for name, p in self._params().items():
            # The kind the parameter's arrays are (Note [Array kinds]): NumPy-interface
            # arrays refuse assignment from legacy ones.
            values = mx.nd.array(snapshot["params"][name], dtype=p.dtype)
            p.set_data(values.as_np_ndarray() if array_kinds.is_numpy(p._data[0] if p._data else None) or
                       (p._data is None and mx.util.is_np_array()) else values)
        load_trainer_states(self.trainer, snapshot["trainer"])
        self._applied_trainer = snapshot["trainer"]

    def check_snapshot(self, snapshot):
        """ValueError when `snapshot` lacks a parameter of this network."""
        missing = sorted(set(self._params()) - set(snapshot.get("params", {})))
        if missing:
            raise ValueError(f"the handed-over state has no values for parameters {', '.join(missing[:5])}: "
                             "was it made by the same network?")

    def sync(self):
        """Rank 0's parameters, trainer states and values on every rank."""
        hvd.broadcast_parameters(self._params(), root_rank=0, prefix="mxplugin.elastic.")
        if getattr(self.trainer, "states_bytes_collective", lambda: False)():
            blob = self._collective_trainer_states()
        else:
            blob = trainer_states(self.trainer) if hvd.rank() == 0 else None
        blob = hvd.broadcast_object(blob if hvd.rank() == 0 else None, root_rank=0, name="mxplugin.elastic.trainer")
        load_trainer_states(self.trainer, blob)
        self._applied_trainer = None
        super().sync()  # the values, then one snapshot of everything

    def _collective_trainer_states(self):
        """Note [Elastic collective states]: a trainer whose states_bytes()
        every rank must call (sharded states are gathered from the ranks'
        slices, PowerSGD's errors summed over the ranks) commits the whole
        states: a lost rank takes its part with it, so nothing less could be
        handed over. In a new world rank 0 has applied the handed-over
        snapshot, and its trainer holds only this world's part of it, so
        rank 0 sends the snapshot's states and every rank takes its part
        for the new size from them (load_states_bytes). In a first world
        nothing was applied, and the ranks' parts make the states together.
        Returns the states on rank 0 (None elsewhere, or the same)."""
        rank0 = hvd.rank() == 0
        applied = hvd.broadcast_object(self._applied_trainer is not None if rank0 else None, root_rank=0,
                                       name="mxplugin.elastic.trainer_applied")
        return self._applied_trainer if applied else trainer_states(self.trainer)


def trainer_states(trainer):
    """The trainer's optimizer and optimizer states, as bytes: in memory
    from a DistributedTrainer, through a file from a gluon.Trainer."""
    if hasattr(trainer, "states_bytes"):
        return trainer.states_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "states")
        trainer.save_states(path)
        with open(path, "rb") as f:
            return f.read()


def load_trainer_states(trainer, data):
    """Loads a trainer's states from bytes (DistributedTrainer's or gluon.Trainer's way)."""
    if hasattr(trainer, "load_states_bytes"):
        trainer.load_states_bytes(data)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "states")
        with open(path, "wb") as f:
            f.write(data)
        trainer.load_states(path)


def write_checkpoint(path, commits, data):
    """Writes atomically and durably: a rank killed while writing, or a
    machine that loses power, leaves the last whole checkpoint."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(pickle.dumps((commits, data)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_checkpoint(path):
    """(commits, data) or None."""
    try:
        with open(path, "rb") as f:
            return pickle.loads(f.read())
    except FileNotFoundError:
        return None


_reference.complete(globals())  # the reference sections of the public names above
