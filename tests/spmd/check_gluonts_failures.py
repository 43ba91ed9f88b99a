"""mxplugin.gluonts.Trainer with bad input or a failing rank.

1. Ranks given different epochs: MismatchError on every rank naming
   'epochs' and each rank's value, before any training.
2. Ranks that build different networks: MismatchError on every rank naming
   the first parameter that differs.
Both leave mxplugin usable; then
3. a callback raises on the last rank in its second epoch: that rank's
   error ends the job, and every other rank fails by itself (the test runs
   this without mpiexec's clean-up) instead of waiting for it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import say, start  # noqa: E402

from gluonts.mx.trainer.callback import Callback  # noqa: E402

import mxplugin.gluonts  # noqa: E402
from gluonts_common import dataset, estimator  # noqa: E402
from mxplugin.errors import MismatchError  # noqa: E402

rank, size = start()
data = dataset(num_series=8)


def expect_mismatch(label, words, **estimator_options):
    trainer = estimator_options.pop("trainer")
    try:
        estimator("sff", trainer, 8, **estimator_options).train(data.train)
    except MismatchError as exc:
        missing = [w for w in words if w not in str(exc)]
        assert not missing, f"{label}: {missing} not in: {exc}"
        say(f"{label} {rank}: {exc}")
        return
    raise AssertionError(f"{label}: no MismatchError on rank {rank}")


expect_mismatch("EPOCHS", ["'epochs'", "epochs=2 on rank 0", "epochs=3 on rank"],
                trainer=mxplugin.gluonts.Trainer(epochs=2 + min(rank, 1), num_batches_per_epoch=2))
expect_mismatch("NETWORK", ["networks differ", "parameter"],
                trainer=mxplugin.gluonts.Trainer(epochs=1, num_batches_per_epoch=2),
                num_hidden_dimensions=[8 if rank == 0 else 9])


class FailOnLastRank(Callback):
    def on_epoch_end(self, epoch_no, epoch_loss, training_network, trainer, best_epoch_info, ctx):
        if rank == size - 1 and epoch_no == 1:
            raise RuntimeError(f"deliberate failure on rank {rank}")
        return True


say(f"TRAINING {rank}")
estimator("sff", mxplugin.gluonts.Trainer(epochs=50, num_batches_per_epoch=4, callbacks=[FailOnLastRank()]),
          8).train(data.train)
say(f"NOT STOPPED {rank}")
