"""Elastic, fault-tolerant training (the API of horovod's elastic mode)::

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(hvd.elastic.GluonState(net, trainer, epoch=0, batch=0))

launched with mxplugin-run --min-np N --max-np M ... (mxplugin.elastic.driver).

The API is loaded on first use (PEP 562): the launcher's side of this
package (driver, service, discovery, supervisor) must not import MXNet,
which runner and state do."""
__all__ = ["run", "State", "ObjectState", "GluonState", "HostsUpdatedInterrupt"]

_HOMES = {"run": "runner", "State": "state", "ObjectState": "state", "GluonState": "state",
          "HostsUpdatedInterrupt": "state"}


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module 'mxplugin.elastic' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"mxplugin.elastic.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
