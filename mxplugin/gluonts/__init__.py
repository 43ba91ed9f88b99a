"""Distributed training of GluonTS's MXNet models (`pip install 'mxplugin[gluonts]'`)::

    import mxplugin.gluonts
    estimator = DeepAREstimator(freq="H", prediction_length=24,
                                trainer=mxplugin.gluonts.Trainer(epochs=20))
    predictor = estimator.train(dataset)      # on every rank, same result
    mxplugin.gluonts.serialize(predictor, path)  # written by rank 0

launched with `mxplugin-run -np N python train.py`. The GluonTS guide says
what the ranks share and what batch size and learning rate mean.
`import mxplugin` never imports this package, nor GluonTS.
"""
import warnings

try:
    with warnings.catch_warnings():
        # GluonTS suggests installing a faster JSON library when it is first
        # imported; that advice is GluonTS's, not this package's to pass on.
        warnings.filterwarnings("ignore", message="Using `json`-module for json-handling", category=UserWarning)
        import gluonts.mx  # noqa: F401
except ImportError as exc:  # the optional extra is not installed
    raise ImportError("mxplugin.gluonts needs GluonTS with its MXNet models: pip install 'mxplugin[gluonts]' "
                      f"(gluonts==0.17.0 and versions of its requirements that work with MXNet 1.9.1): {exc}"
                      ) from exc

from mxplugin.gluonts.serialize import serialize
from mxplugin.gluonts.trainer import Trainer

__all__ = ["Trainer", "serialize"]
