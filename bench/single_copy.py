"""What MPICH's single copy (CMA) is worth on the flat MPI path:

    python bench/single_copy.py

Between ranks of one host MPICH copies a large message straight from the
sender's memory (process_vm_readv, "CMA"). When the sender is killed in the
middle, that read fails and a survivor may go on with a half-written result
(docs/reliability.md); with the single copy off (MPIR_CVAR_CH4_CMA_ENABLE=0)
the message goes through MPICH's shared-memory cells instead, which outlive
the sender. This measures the cost: 2 ranks on the MPI path
(MXPLUGIN_HIERARCHICAL_ALLREDUCE=0), allreduce_, allgather and reducescatter
of 64 KB to 16 MB, in jobs with the single copy on (the reference) and off,
started alternately round after round; each job's figure is the median of
its calls. Writes bench/results/single_copy.json.
"""
import os
import statistics
import sys
import time

from harness import arguments, medians, spread, write_result

import jobs

SIZES = [64 << 10, 1 << 20, 4 << 20, 16 << 20]
KINDS = ("allreduce_", "allgather", "reducescatter")
SETTINGS = {"on": "1", "off": "0"}


def worker(iters, warmup):
    import mxnet as mx

    sys.path.insert(0, jobs.REPO)
    import mxplugin as hvd

    hvd.init()
    figures = {}
    for size in SIZES:
        n = size // 4
        x = mx.nd.ones((n,))
        calls = {"allreduce_": lambda: hvd.allreduce_(x, op=hvd.Sum, name=f"ar{size}"),
                 "allgather": lambda: hvd.allgather(x[: n // hvd.size()], name=f"ag{size}"),
                 "reducescatter": lambda: hvd.reducescatter(x, op=hvd.Sum, name=f"rs{size}")}
        for kind in KINDS:
            times = []
            for i in range(warmup + iters):
                hvd.barrier()
                start = time.perf_counter()
                out = calls[kind]()
                (out if out is not None else x).wait_to_read()
                if i >= warmup:
                    times.append(time.perf_counter() - start)
            figures[f"{kind} {size}"] = statistics.median(times)
    if hvd.rank() == 0:
        jobs.print_result(figures)
    hvd.shutdown()


def main():
    if "--worker" in sys.argv:
        args = sys.argv[sys.argv.index("--worker") + 1:]
        worker(int(args[0]), int(args[1]))
        return
    parser = arguments(__doc__, rounds=5, iters=(30, "measured calls of each kind and size per job"),
                       warmup=5, output="single_copy.json")
    args = parser.parse_args()
    samples = {name: [] for name in SETTINGS}
    for r in range(args.rounds):
        order = list(SETTINGS) if r % 2 == 0 else list(reversed(SETTINGS))
        for name in order:
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0",
                   "MPIR_CVAR_CH4_CMA_ENABLE": SETTINGS[name]}
            cmd = jobs.mpi_command(2, jobs.this_script(__file__, "--worker", args.iters, args.warmup))
            samples[name].append(jobs.run_job(cmd, env=env, what=f"single copy {name}"))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    figures = {}
    for key in samples["on"][0]:
        per = {name: [s[key] for s in samples[name]] for name in SETTINGS}
        mid = medians(per)
        figures[key] = {"on_us": mid["on"] * 1e6, "off_us": mid["off"] * 1e6, "off_over_on": mid["off"] / mid["on"],
                        "spread_us": {name: {k: v * 1e6 for k, v in s.items()} for name, s in spread(per).items()}}
        print(f"{key:>22}: on {mid['on'] * 1e6:9.1f} us, off {mid['off'] * 1e6:9.1f} us, "
              f"off/on {mid['off'] / mid['on']:.2f}", flush=True)
    write_result(args.output, {"ranks": 2, "path": "MPI (MXPLUGIN_HIERARCHICAL_ALLREDUCE=0)",
                               "rounds": args.rounds, "iters": args.iters, "figures": figures})


if __name__ == "__main__":
    main()
