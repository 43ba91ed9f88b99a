"""Two builds of the core against each other, in one run:

    python bench/core_builds.py --build before=/tmp/old --build after=/tmp/new \\
        --output reduction_order.json

Each --build NAME=DIR names a directory holding an `mxplugin` package (a
copy of this checkout's, with that build's `_core` extension in it); the
jobs import it first (PYTHONPATH). For every configuration (ranks, data
plane) the builds take turns, round after round, each round one launch of
bench/allreduce.py's resnet50_v1 gradient set (193 tensors, 102 MB,
`grouped_allreduce_` and a per-tensor `allreduce_` loop) and of a hybridized
resnet50_v1 trainer step (bench/trainer.py scaling, batch 4 per rank at
64x64: the time of DistributedTrainer.step(), its allreduce and update); medians over rounds of each launch's medians, and the ratio of each
build to the first. One thread per rank (OMP_NUM_THREADS=1).
"""
import json
import os
import statistics
import sys
import tempfile

from harness import HERE, REPO, arguments, write_result
from jobs import run

CONFIGS = {
    "2-shm": {"ranks": 2, "plane": "shared memory", "env": {}},
    "3-shm": {"ranks": 3, "plane": "shared memory", "env": {}},
    "3-flat": {"ranks": 3, "plane": "flat MPI", "env": {"MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0"}},
}


def launch(build_dir, config, argv, output):
    env = dict(os.environ, OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1",
               PYTHONPATH=build_dir + os.pathsep + os.environ.get("PYTHONPATH", ""), **config["env"])
    cmd = [sys.executable, "-m", "mxplugin_run", "-np", str(config["ranks"]), sys.executable, *argv,
           "--output", output]
    run(cmd, env=env, timeout=1200, what=" ".join(cmd))
    with open(output) as f:
        return json.load(f)


def allreduce_times(build_dir, config, scratch):
    result = launch(build_dir, config, [os.path.join(HERE, "allreduce.py"), "--no-curve", "--iters", "6"],
                    os.path.join(scratch, "allreduce.json"))
    med = result["gradient_set"]["median_s"]
    return {"grouped_allreduce_": med["grouped_allreduce_"], "per_tensor_allreduce_": med["per_tensor_allreduce_"]}


def step_time(build_dir, config, scratch):
    result = launch(build_dir, config, [os.path.join(HERE, "trainer.py"), "scaling", "--batch-size", "4",
                                        "--image-size", "64", "--rounds", "2", "--steps", "3"],
                    os.path.join(scratch, "trainer.json"))
    return {"trainer_step_allreduce_update": result["median_allreduce_update_s"]["mxplugin"]}


def section(result, title, why):
    """docs/benchmarks.md's lines for a result of this script: `title` names
    the change, `why` says what the builds differ in."""
    if not result:
        return []
    names = list(result["builds"])
    first = names[0]
    lines = [f"## {title} (`bench/core_builds.py`)", "", why, "",
             f"Medians of {result['rounds']} interleaved rounds, one launch per build per round (each the median of "
             f"its own calls or steps); ratio to `{first}`; the range of the rounds.",
             "", "| ranks | data plane | measure | " + " | ".join(names) + " |", "|---|---|---|" + "---|" * len(names)]
    for row in result["configs"]:
        for what in row["median_s"][first]:
            cells = [f"{row['median_s'][n][what] * 1e3:.1f} ms ({row[f'ratio_to_{first}'][n][what]:.3f}; rounds "
                     f"{min(row['samples_s'][n][what]) * 1e3:.1f}-{max(row['samples_s'][n][what]) * 1e3:.1f})"
                     for n in names]
            lines.append(f"| {row['ranks']} | {row['plane']} | `{what}` | " + " | ".join(cells) + " |")
    return lines + [""]


def main():
    p = arguments(__doc__, rounds=3, output="core_builds.json")
    p.add_argument("--build", action="append", required=True, help="NAME=DIR (twice or more)")
    p.add_argument("--config", action="append", choices=sorted(CONFIGS),
                   help="a configuration to run (repeatable; default all)")
    args = p.parse_args()
    builds = dict(b.split("=", 1) for b in args.build)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for config in (CONFIGS[c] for c in (args.config or CONFIGS)):
            samples = {name: {} for name in builds}
            for _ in range(args.rounds):
                for name, directory in builds.items():
                    for what, seconds in {**allreduce_times(directory, config, scratch),
                                          **step_time(directory, config, scratch)}.items():
                        samples[name].setdefault(what, []).append(seconds)
            medians = {name: {w: statistics.median(v) for w, v in s.items()} for name, s in samples.items()}
            first = next(iter(builds))
            ratios = {name: {w: m / medians[first][w] for w, m in med.items()} for name, med in medians.items()}
            rows.append({"ranks": config["ranks"], "plane": config["plane"], "samples_s": samples,
                         "median_s": medians, f"ratio_to_{first}": ratios})
            for name in builds:
                print(f"{config['ranks']} ranks, {config['plane']}, {name}: " + ", ".join(
                    f"{w} {m * 1e3:.1f} ms ({ratios[name][w]:.3f})" for w, m in medians[name].items()), flush=True)
    write_result(args.output, {"builds": builds, "rounds": args.rounds, "configs": rows, "checkout": REPO})


if __name__ == "__main__":
    main()
