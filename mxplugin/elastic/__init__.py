"""Elastic, fault-tolerant training (the API of horovod's elastic mode)::

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(hvd.elastic.GluonState(net, trainer, epoch=0, batch=0))

launched with mxplugin-run --min-np N --max-np M ... (the launcher's side
is mxplugin_run.elastic: its driver starts the worlds)."""
from mxplugin.elastic.runner import run
from mxplugin.elastic.state import GluonState, HostsUpdatedInterrupt, ObjectState, State

__all__ = ["run", "State", "ObjectState", "GluonState", "HostsUpdatedInterrupt"]
