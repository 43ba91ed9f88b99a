"""Writing a trained predictor once per job."""
from pathlib import Path

from mxplugin import basics
from mxplugin.functions import broadcast_object


def serialize(predictor, path):
    """predictor.serialize(path) on rank 0 only; every rank returns once
    it is written, or raises the same error when rank 0 could not write
    it. Every rank holds the same predictor after training, so one copy is
    the job's result; N ranks writing one shared path would race. Call it
    on every rank: the others wait for rank 0.

    GluonTS: ``predictor.serialize(path)``, which here runs once per job
    (in a job of one rank, or before ``init()``, this process writes).

    Parameters
    ----------
    predictor : gluonts.model.predictor.Predictor
        The predictor to write, the same on every rank (as
        ``mxplugin.gluonts.Trainer`` leaves it).
    path : str or pathlib.Path
        The directory to write to, made if missing: on rank 0's file system
        (on another host, a rank does not find it there unless the disk is
        shared).

    Raises
    ------
    OSError
        On every rank, when rank 0 could not write the predictor (its error
        is named). In a job of one rank, what ``predictor.serialize`` raises.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> import mxplugin as hvd
    >>> import mxplugin.gluonts
    >>> from gluonts.model.predictor import Predictor
    >>> from gluonts.model.seasonal_naive import SeasonalNaivePredictor
    >>> hvd.init()
    >>> predictor = SeasonalNaivePredictor(prediction_length=4, season_length=2)  # or a trained one
    >>> path = pathlib.Path(tempfile.gettempdir(), "mxplugin-example-predictor")  # the same on every rank
    >>> mxplugin.gluonts.serialize(predictor, path)  # rank 0 writes; every rank returns once it is written
    >>> Predictor.deserialize(path).prediction_length  # this host's ranks read rank 0's copy
    4
    """
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
