"""Writing a trained predictor once per job."""
from pathlib import Path

from mxplugin import basics
from mxplugin.functions import broadcast_object


def serialize(predictor, path):
    """predictor.serialize(path) on rank 0 only; every rank returns once
    it is written, or raises the same error when rank 0 could not write
    it. Every rank holds the same predictor after training, so one copy is
    the job's result; N ranks writing one shared path would race."""
    path = Path(path)
    if not basics.is_initialized() or basics.size() == 1:
        path.mkdir(parents=True, exist_ok=True)
        predictor.serialize(path)
        return
    failure = None
    if basics.rank() == 0:
        try:
            path.mkdir(parents=True, exist_ok=True)
            predictor.serialize(path)
        except Exception as exc:  # noqa: BLE001 -- reported on every rank below
            failure = f"{type(exc).__name__}: {exc}"
    failure = broadcast_object(failure, root_rank=0, name="gluonts.serialize")
    if failure is not None:
        raise OSError(f"mxplugin.gluonts.serialize: rank 0 could not write the predictor to {path}: {failure}")
