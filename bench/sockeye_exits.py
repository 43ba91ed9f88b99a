"""Sockeye's own `--horovod` training, run again and again, every run's exit
code: Sockeye uses mpi4py beside Horovod (`mpi4py.rc.initialize` and
`rc.finalize` off, `MPI.COMM_WORLD.bcast` at start), so its exit is where
two users of MPI in one process meet.

    python bench/sockeye_exits.py --runs 20      # writes bench/results/sockeye_exits.json

Needs Sockeye 2.3 and its libraries importable (it pins mxnet 1.8, so
install it beside this venv's mxnet 1.9.1 without its dependencies:
`pip install --no-deps --target DIR sockeye==2.3.24 portalocker
sacrebleu==1.4.14` and `PYTHONPATH=DIR`). Sockeye is run unchanged:
`import horovod.mxnet as hvd` finds mxplugin through a two-line
`horovod` package put first on the ranks' path. Each run: `mxplugin-run
-np 2 python -m sockeye.train --horovod` on a small generated task
(reversing digit sequences), a one-layer transformer, 20 updates with a
checkpoint at 10 and 20; a run counts as clean when it exits 0 and wrote
its model's parameters.
"""
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from harness import REPO, arguments, read_result, write_result

SHIM = '''import sys

import mxplugin

sys.modules[__name__ + ".mxnet"] = mxplugin
'''
TRAIN = ["--use-cpu", "--num-layers", "1", "--transformer-model-size", "32", "--transformer-attention-heads", "2",
         "--transformer-feed-forward-num-hidden", "64", "--num-embed", "32", "--batch-size", "32",
         "--batch-type", "sentence", "--max-updates", "20", "--checkpoint-interval", "10",
         "--decode-and-evaluate", "0", "--max-seq-len", "12", "--seed", "1", "--quiet"]
TAIL_CHARS = 3000
RUN_TIMEOUT_S = 600


def write_task(directory, seed=1):
    """Parallel files of digit sequences and their reversals."""
    rng = random.Random(seed)
    for name, lines in (("train", 2000), ("dev", 100)):
        with open(os.path.join(directory, f"{name}.src"), "w") as src, \
                open(os.path.join(directory, f"{name}.trg"), "w") as trg:
            for _ in range(lines):
                words = [str(rng.randrange(20)) for _ in range(rng.randrange(3, 10))]
                src.write(" ".join(words) + "\n")
                trg.write(" ".join(reversed(words)) + "\n")


def main():
    p = arguments(__doc__)
    p.add_argument("--runs", type=int, default=20, help="training runs (default 20)")
    args = p.parse_args()
    spec = importlib.util.find_spec("sockeye")
    if spec is None:
        raise SystemExit("sockeye is not importable: see this script's --help for how to install it beside mxnet 1.9.1")
    import sockeye

    with tempfile.TemporaryDirectory(prefix="mxplugin-sockeye-") as work:
        os.makedirs(os.path.join(work, "shim", "horovod"))
        with open(os.path.join(work, "shim", "horovod", "__init__.py"), "w") as f:
            f.write(SHIM)
        write_task(work)
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join([os.path.join(work, "shim"), REPO, os.environ.get("PYTHONPATH", "")]))
        subprocess.run([sys.executable, "-m", "sockeye.prepare_data", "-s", "train.src", "-t", "train.trg",
                        "-o", "prepared", "--shared-vocab"], cwd=work, env=env, check=True, capture_output=True)
        runs = []
        for i in range(args.runs):
            model = os.path.join(work, f"model{i}")
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "mxplugin_run", "-np", "2", sys.executable, "-m",
                                   "sockeye.train", "--prepared-data", "prepared", "-vs", "dev.src", "-vt", "dev.trg",
                                   "-o", model, "--horovod", *TRAIN],
                                  cwd=work, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
            wrote = os.path.exists(os.path.join(model, "params.best"))
            run = {"exit_code": done.returncode, "wrote_model": wrote, "seconds": time.monotonic() - start}
            if done.returncode != 0 or not wrote:
                run["output_tail"] = (done.stdout + done.stderr)[-TAIL_CHARS:]
            runs.append(run)
            print(f"run {i + 1}/{args.runs}: exit {done.returncode}, model {'written' if wrote else 'missing'}, "
                  f"{run['seconds']:.1f} s", flush=True)
    clean = sum(r["exit_code"] == 0 and r["wrote_model"] for r in runs)
    write_result("sockeye_exits.json", {"sockeye": sockeye.__version__, "ranks": 2, "train_args": TRAIN,
                                        "runs": runs, "clean_runs": clean})
    print("\n".join(report_section(read_result("sockeye_exits.json"))))
    sys.exit(0 if clean == len(runs) else 1)


def report_section(r):
    if not r:
        return []
    runs = r["runs"]
    codes = sorted({run["exit_code"] for run in runs})
    return ["## Sockeye's `--horovod` training, run after run (`bench/sockeye_exits.py`)", "",
            f"Sockeye {r['sockeye']} unchanged (`import horovod.mxnet` finds mxplugin), with mpi4py beside it as "
            f"Sockeye uses it, {r['ranks']} ranks under `mxplugin-run`, a one-layer transformer for 20 updates: "
            f"**{r['clean_runs']} of {len(runs)}** runs exited 0 with their model written (exit codes seen: "
            f"{', '.join(map(str, codes))}; median run {statistics.median(run['seconds'] for run in runs):.1f} s).", ""]


if __name__ == "__main__":
    main()
