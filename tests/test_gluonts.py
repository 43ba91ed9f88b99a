"""mxplugin.gluonts: GluonTS's MXNet estimators trained on several ranks
(tests/spmd/check_gluonts_*.py, run under mpiexec). Skipped, saying why,
where GluonTS is not installed (`pip install -e '.[gluonts]'`; the test
extra includes it)."""
import importlib.util
import json
import subprocess
import sys
import time

import pytest

from mpi_harness import HANG_S, REPO, assert_spmd_ok, rank_env, run_spmd

TIMEOUT = 240  # generous: other test runs may share this machine's two cores
needs_gluonts = pytest.mark.skipif(importlib.util.find_spec("gluonts") is None,
                                   reason="needs gluonts (pip install -e '.[gluonts]')")
# One process is the reference: the same global batch and number of steps.
WITHIN = 0.10


def train(np, models, out_dir):
    """Runs check_gluonts_training.py; returns rank 0's metrics per model."""
    out, _ = assert_spmd_ok("check_gluonts_training.py", np, [models, out_dir], timeout=TIMEOUT)
    lines = [line for line in out.splitlines() if line.startswith("METRICS ")]
    assert lines, f"no METRICS line from rank 0:\n{out}"
    return json.loads(lines[-1][len("METRICS "):])


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return train(1, "deepar,sff", tmp_path_factory.mktemp("one_process"))


@needs_gluonts
def test_gluonts_trains_on_one_process(one_process):
    """DeepAR and SimpleFeedForward train (loss falls, the predictor is
    written and read back) with one process: the reference for the others."""
    assert set(one_process) == {"deepar", "sff"}


@needs_gluonts
@pytest.mark.parametrize("np, models", [(2, "deepar,sff"), (3, "sff")])
def test_gluonts_forecasts_on_several_ranks_as_well_as_one_process(np, models, one_process, tmp_path):
    """Identical parameters on every rank, the averaged loss falling, and
    mean weighted quantile loss on the held-out window within 10% of one
    process trained with the same global batch and steps."""
    metrics = train(np, models, tmp_path)
    for kind in models.split(","):
        ours, reference = metrics[kind]["mean_wQuantileLoss"], one_process[kind]["mean_wQuantileLoss"]
        assert abs(ours / reference - 1) <= WITHIN, (
            f"{kind} on {np} ranks: mean_wQuantileLoss {ours:.4f} against {reference:.4f} on one process "
            f"(MASE {metrics[kind]['MASE']:.3f} against {one_process[kind]['MASE']:.3f})")


@needs_gluonts
@pytest.mark.parametrize("draw_ahead", ["0", "1"])
def test_gluonts_ranks_match_gluonts_on_the_combined_batch_and_decide_alike(draw_ahead):
    """2 ranks x B/2 end where GluonTS's own Trainer does on B; validation
    loss split and summed; LearningRateReduction, early stopping and a stop
    asked by one rank's callback act on every rank alike. Both ways of
    drawing batches (Note [Drawing ahead]), whichever the machine's cores pick."""
    assert_spmd_ok("check_gluonts_agreement.py", 2, env={"MXPLUGIN_GLUONTS_DRAW_AHEAD": draw_ahead},
                   timeout=TIMEOUT)


@needs_gluonts
def test_gluonts_bad_input_and_a_failing_rank_end_every_rank_fast():
    """Different epochs or networks: MismatchError on every rank. A rank
    whose callback raises: every rank ends by itself (no mpiexec clean-up)
    within seconds, the failure named on stderr."""
    start = time.monotonic()
    rc, out, err = run_spmd("check_gluonts_failures.py", 2, env={"MXPLUGIN_PEER_TIMEOUT_SECONDS": 10},
                            timeout=TIMEOUT, auto_cleanup=False)
    elapsed = time.monotonic() - start
    report = f"exit {rc} after {elapsed:.1f} s\n--- stdout\n{out}\n--- stderr\n{err}"
    for rank in range(2):
        for label in ("EPOCHS", "NETWORK", "TRAINING"):
            assert f"{label} {rank}" in out, report
    assert "NOT STOPPED" not in out, report
    assert rc != 0 and "deliberate failure on rank 1" in err, report
    assert "mxplugin has been shut down" in err, report  # rank 0's own error, not a kill
    assert elapsed < HANG_S, report  # Note [Hang limits]


@needs_gluonts
def test_gluonts_trainer_round_trips_through_gluonts_serde():
    """Estimators are serialised with their trainer (gluonts.core.serde):
    ours comes back as itself, with its arguments."""
    from gluonts.core import serde

    import mxplugin.gluonts

    trainer = mxplugin.gluonts.Trainer(epochs=3, learning_rate=0.5, clip_gradient=2.0)
    back = serde.decode(serde.encode(trainer))
    assert type(back) is mxplugin.gluonts.Trainer
    assert (back.epochs, back.learning_rate, back.clip_gradient) == (3, 0.5, 2.0)


@needs_gluonts
def test_gluonts_example_runs_end_to_end_with_the_launcher(tmp_path):
    """examples/gluonts_deepar.py, small, under mxplugin-run at 2 ranks:
    trains, evaluates and writes the predictor once."""
    out_dir = tmp_path / "deepar"
    cmd = [sys.executable, "-m", "mxplugin_run", "-np", "2", sys.executable, f"{REPO}/examples/gluonts_deepar.py",
           "--series", "10", "--epochs", "2", "--batches-per-epoch", "5", "--batch-size", "16",
           "--out", str(out_dir)]
    result = subprocess.run(cmd, cwd=REPO, env=rank_env(), capture_output=True, text=True, timeout=TIMEOUT)
    report = f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, report
    assert "2 rank(s): MASE" in result.stdout + result.stderr, report
    assert (out_dir / "prediction_net-0000.params").exists(), report


def test_import_mxplugin_needs_no_gluonts():
    """`import mxplugin` imports no GluonTS; mxplugin.gluonts without it
    says what to install."""
    code = ("import sys, mxplugin\n"
            "assert 'gluonts' not in sys.modules, 'import mxplugin imported gluonts'\n"
            "sys.modules['gluonts'] = None\n"
            "try:\n"
            "    import mxplugin.gluonts\n"
            "except ImportError as exc:\n"
            "    assert \"pip install 'mxplugin[gluonts]'\" in str(exc), exc\n"
            "else:\n"
            "    raise AssertionError('no ImportError without gluonts')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=rank_env(), capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
