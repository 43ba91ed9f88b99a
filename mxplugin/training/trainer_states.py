"""DistributedTrainer's optimizer states (a mixin of it): their size, and
checkpoints of them as bytes or files that gluon.Trainer can read too
(sharded states gathered, PowerSGD's errors summed)."""
import pickle

from mxplugin.ops import fence
from mxplugin.training import sharding
from mxplugin.training.powersgd import STATE_KEY as POWERSGD_KEY


def bucket_state_arrays(bucket):
    """The NDArrays of a bucket's optimizer states: its flat buffers when
    the bucket holds them, else each parameter's own."""
    if bucket.state is not None:
        return sharding.state_arrays(bucket.state)
    return [a for st in bucket.param_states.values() for a in sharding.state_arrays(st)]


class TrainerStates:
    """Optimizer states of DistributedTrainer: what they weigh and how they are saved and loaded."""

    def optimizer_state_bytes(self):
        """Bytes of optimizer state (multi-precision master weights included)
        this rank holds: with shard_optimizer_states, about 1/N of an
        unsharded trainer's."""
        layout = self._prepare()
        excluded = {index for index, _ in layout.excluded}
        arrays = [a for i, st in self._updaters[0].states.items() if i in excluded
                  for a in sharding.state_arrays(st)]
        arrays += [a for st in layout.local_states.values() for a in sharding.state_arrays(st)]
        if self._shards is not None:
            arrays += [a for s in self._shards.slices for a in sharding.state_arrays(s.state)]
        arrays += [a for b in layout.buckets for a in bucket_state_arrays(b)]
        return sum(sharding.nbytes(a) for a in arrays)

    def _param_states(self):
        """Per-parameter states of the layout (gathered from every rank's
        slices when sharded: a collective)."""
        states = self._layout.param_states()
        if self._shards is not None:
            states.update(self._shards.gathered_param_states())
        return states

    def save_states(self, fname):
        """Saves optimizer states (per parameter, loadable by this class or
        gluon.Trainer). With shard_optimizer_states or PowerSGD every rank of
        the process set must call it (states_bytes_collective()) and rank 0
        writes."""
        collective = self.states_bytes_collective()
        data = self.states_bytes()
        if collective and self._process_set.rank() != 0:
            return
        with open(fname, "wb") as f:
            f.write(data)

    def load_states(self, fname):
        with open(fname, "rb") as f:
            self.load_states_bytes(f.read())

    def states_bytes(self):
        """What save_states writes, without a file (elastic commits take it in memory)."""
        self._prepare()
        if self.states_bytes_collective():  # Note [Fences] in src/core/message_conflicts.cc
            fence("DistributedTrainer.save_states() (it gathers the sharded or PowerSGD states of every rank)",
                  self._process_set)
        states = dict(self._updaters[0].states)
        states.update(self._param_states())
        if self._powersgd is not None:
            states[POWERSGD_KEY] = self._powersgd.state_dict(self._process_set, self._world())
        return pickle.dumps((states, self._optimizer))

    def states_bytes_collective(self):
        """Whether states_bytes() (and so save_states) is a collective that
        every rank of the process set must call: with sharded states (they
        are gathered) and with PowerSGD (its errors are summed, Note
        [PowerSGD state across worlds] in powersgd.py)."""
        return (self._shard or self._powersgd is not None) and self._world()

    def load_states_bytes(self, data):
        self._prepare()
        loaded = pickle.loads(data)
        states, optimizer = loaded if isinstance(loaded, tuple) else (loaded, self._optimizer)
        states = dict(states)
        compressor = states.pop(POWERSGD_KEY, None)
        if self._powersgd is not None and compressor is not None:
            ranks = self._process_set.size() if self._world() else 1
            self._powersgd.load_state_dict(compressor, self._params, ranks)
        optimizer.param_dict = {i: param for i, param in enumerate(self._params)}
        self._optimizer = optimizer
        for updater in self._updaters:
            updater.optimizer = optimizer
            updater.states = {i: s for i, s in states.items()}
            updater.states_synced = dict.fromkeys(states, False)
        self._pending_states = states
        self._layout = None  # rebuilt with the loaded states on next use
        self._ensure_layout()
