"""PowerSGD across fake hosts (tests/fake_cluster.py: network namespaces,
needs root), against the uncompressed exchange measured in the same run:

    python bench/powersgd_hosts.py all      # or: bytes, exchange, step

bytes: 2 hosts x 1 rank, links not limited. Bytes each host sends on its
  link per exchange of resnet50_v1's gradient set (102.3 MB float32),
  uncompressed and with PowerSGD at rank 1, 2, 4 and 8, read from the
  interface byte counter that FakeCluster.tx_bytes reads (each rank reads its
  own host's, between barriers around every exchange). Beside them, what
  the allreduces are given (bench/powersgd.py's count from the tensors'
  sizes): between 2 hosts each host must send about that once, so the
  uncompressed figure proves the traffic crossed the link.
  -> bench/results/powersgd_link_bytes.json
exchange: 2 hosts x 2 ranks (hierarchical allreduce) with each host's link
  limited to 2 and to 10 Gbit/s (tc tbf), the same 4 ranks on one host (no
  link: shared memory), and 2 hosts x 1 rank at 2 and 10 Gbit/s (a core for
  each rank). The time of one exchange (compress + allreduces + decompress,
  as bench/powersgd.py) at PowerSGD rank 1 and 4 against the uncompressed
  grouped allreduce of the same gradients, interleaved iteration by
  iteration; medians. -> bench/results/powersgd_exchange.json
step: 2 hosts x 1 rank, 2 Gbit/s. Hybridized resnet50_v1 training steps
  (bench/trainer.py's model, SGD momentum) with DistributedTrainer
  uncompressed and with Compression.powersgd(rank=4), and rank 0 alone
  with gluon.Trainer on the same per-rank batch (the other rank waiting), in
  interleaved rounds; per-rank efficiency = the single process's median
  step time / the distributed one's. Each round also times one more step
  per method in parts: forward + backward, then step() once every rank's
  backward is done (exchange + update, no overlap with backward).
  -> bench/results/powersgd_step.json

Every run between fake hosts uses UCX_TLS=tcp,self (fake_cluster.ENV) so
that traffic between them crosses the links. Each rank runs one thread; the
machine's cores and memory bandwidth are shared by all ranks, so CPU work
(PowerSGD's products) is slower here than on hosts of their own.

Other work on the machine: every job runs in fake hosts' namespaces, and for
each timed exchange or step rank 0 counts the cores kept busy by everything
else (the machine's user + system time less the job's processes' own:
OtherWork). The medians reported (median_s, median_step_s) are over the
samples during which that stayed below --quiet-cores (0.2), with the number
of such samples beside them; the medians of all samples are recorded too."""
import os
import statistics
import time

from harness import REPO, arguments, interleave, median_or_none, medians, read_result, write_result
from jobs import check, print_result, result_in, run, this_script
from machine import OtherWork, load_span, quiet_only

COUNTER = "/sys/class/net/eth0/statistics/tx_bytes"  # inside a fake host: its link (fake_cluster.IFACE)
RUN_TIMEOUT_S = 600
BYTES_RANKS = (1, 2, 4, 8)
TIMED_RANKS = (1, 4)
STEP_RANK = 4


# -- ranks -------------------------------------------------------------------------
def link_bytes_sent():
    with open(COUNTER) as f:
        return int(f.read())


def per_host(value):
    """[value of local rank 0 of each host], in host order, on every rank."""
    import mxplugin as hvd

    everyone = hvd.allgather_object((hvd.cross_rank(), hvd.local_rank(), value), name="per_host")
    return [v for _, local, v in sorted(everyone, key=lambda e: e[0]) if local == 0]


def report(result):
    import mxplugin as hvd

    if hvd.rank() == 0:
        print_result(result)


def exchange_worker(ranks, iterations, warmup, on_fake_hosts, quiet_cores):
    import mxnet as mx
    import numpy as np

    import mxplugin as hvd
    from allreduce import resnet50_shapes
    from powersgd import exchange_samples, sent_bytes

    hvd.init()
    shapes = resnet50_shapes()
    rng = np.random.RandomState(hvd.rank())
    grads = [mx.nd.array(rng.standard_normal(s) * 1e-3) for s in shapes]
    counter = link_bytes_sent if on_fake_hosts else None
    other = other_work(hvd) if on_fake_hosts else None
    times, sent, busy = exchange_samples(grads, shapes, ranks, iterations, warmup, counter, other)
    methods = ["uncompressed", *ranks]
    result = {"ranks": hvd.size(), "hosts": hvd.cross_size(), "iterations": iterations,
              "allreduce_input_bytes": {str(m): 4 * sum(int(np.prod(s)) for s in shapes) if m == "uncompressed"
                                        else sent_bytes(shapes, m) for m in methods},
              "times_s": {str(m): times[m] for m in methods},
              "median_s_all_samples": {str(m): statistics.median(times[m]) for m in methods}}
    if busy is not None:
        quiet = {str(m): quiet_only(times[m], busy[m], quiet_cores) for m in methods}
        result.update({"quiet_cores": quiet_cores, "other_work_cores": {str(m): busy[m] for m in methods},
                       "quiet_samples": {m: len(v) for m, v in quiet.items()},
                       "median_s": {m: median_or_none(v) for m, v in quiet.items()}})
    else:
        result["median_s"] = result["median_s_all_samples"]
    if sent is not None:
        hosts = per_host({str(m): sent[m] for m in methods})
        result["link_bytes"] = {str(m): [h[str(m)] for h in hosts] for m in methods}
        result["median_link_bytes"] = {str(m): [statistics.median(h[str(m)]) for h in hosts] for m in methods}
    report(result)
    hvd.shutdown()


def other_work(hvd):
    """An OtherWork for this job (a collective; rank 0's figures are the
    ones reported)."""
    return OtherWork(hvd.allgather_object(os.readlink("/proc/self/ns/net"), name="namespaces"))


def step_worker(rounds, steps, batch, image, quiet_cores):
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    import mxplugin as hvd
    from trainer import SGD, resnet

    hvd.init()
    rank = hvd.rank()
    counter = link_bytes_sent
    other = other_work(hvd)
    x = mx.nd.random.uniform(shape=(batch, 3, image, image))
    y = mx.nd.array(np.arange(batch) % 1000)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    compressed = f"powersgd rank {STEP_RANK}"
    runs = {"uncompressed": resnet(True, image), compressed: resnet(True, image)}
    trainers = {"uncompressed": hvd.DistributedTrainer(runs["uncompressed"].collect_params(), "sgd", dict(SGD)),
                compressed: hvd.DistributedTrainer(runs[compressed].collect_params(), "sgd", dict(SGD),
                                                   compression=hvd.Compression.powersgd(rank=STEP_RANK))}
    if rank == 0:
        runs["single"] = resnet(True, image)
        trainers["single"] = gluon.Trainer(runs["single"].collect_params(), "sgd", dict(SGD), kvstore=None)
    order = ["single", "uncompressed", compressed]

    def timed_steps(method):
        """[(seconds, cores other work kept busy meanwhile)] of `steps`
        steps, and the bytes this host sent on its link during them."""
        net, trainer = runs[method], trainers[method]
        mx.nd.waitall()
        start_bytes, out = counter(), []
        for _ in range(steps):
            other.begin()
            start = time.perf_counter()
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(batch)
            mx.nd.waitall()
            out.append((time.perf_counter() - start, other.cores()))
        return out, counter() - start_bytes

    def split_step(method):
        """One more step, its parts timed apart: forward + backward, then
        (after every rank's backward) step(): the exchange and the update,
        without the overlap with backward that the timed steps allow.
        Returns (forward + backward s, step() s, other work's cores)."""
        net, trainer = runs[method], trainers[method]
        mx.nd.waitall()
        other.begin()
        start = time.perf_counter()
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        mx.nd.waitall()
        compute = time.perf_counter() - start
        if method != "single":
            hvd.barrier()
        start = time.perf_counter()
        trainer.step(batch)
        mx.nd.waitall()
        return compute, time.perf_counter() - start, other.cores()

    def one_round(method):
        def run():
            hvd.barrier()
            if method == "single" and rank != 0:
                return None  # the reference is one process alone
            out, nbytes = timed_steps(method)
            return out, nbytes / steps, split_step(method)
        return run

    # the warm-up round: static allocation, PowerSGD's buffers
    got = interleave({m: one_round(m) for m in order}, rounds, warmup=1)
    got = {m: [g for g in v if g is not None] for m, v in got.items()}
    samples = {m: [s for out, _, _ in v for s in out] for m, v in got.items()}
    sent = {m: [nbytes for _, nbytes, _ in v] for m, v in got.items()}
    parts = {m: [part for _, _, part in v] for m, v in got.items()}
    hvd.barrier()
    sent_per_host = per_host(medians({m: v for m, v in sent.items() if v}))
    if rank != 0:
        return hvd.shutdown()

    quiet = {m: quiet_only([t for t, _ in v], [c for _, c in v], quiet_cores) for m, v in samples.items()}
    med = {m: median_or_none(v) for m, v in quiet.items()}
    med_all = {m: median_or_none([t for t, _ in v]) for m, v in samples.items()}
    quiet_parts = {m: quiet_only(v, [c for _, _, c in v], quiet_cores) for m, v in parts.items()}
    result = {"ranks": hvd.size(), "batch_per_rank": batch, "image": image, "rounds": rounds,
              "steps_per_round": steps, "quiet_cores": quiet_cores,
              "samples": {m: [{"step_s": t, "other_work_cores": c} for t, c in v] for m, v in samples.items()},
              "quiet_samples": {m: len(v) for m, v in quiet.items()},
              "median_step_s": med, "median_step_s_all_samples": med_all,
              "link_bytes_per_step": {m: [h.get(m) for h in sent_per_host] for m in order},
              "median_parts_s": {m: {"forward_backward": median_or_none([p[0] for p in v]),
                                     "step_call": median_or_none([p[1] for p in v]), "samples": len(v)}
                                 for m, v in quiet_parts.items()}}
    if all(med.values()):
        result["efficiency"] = {m: med["single"] / med[m] for m in order[1:]}
    result["efficiency_all_samples"] = {m: med_all["single"] / med_all[m] for m in order[1:]}
    report(result)
    hvd.shutdown()


# -- driver ----------------------------------------------------------------------------
def launch(cluster, slots, argv, env, tcp=True):
    """Runs this file's worker on the fake hosts (or, without a cluster, on
    this machine), with UCX_TLS=tcp,self on fake hosts unless not `tcp`.
    Returns the rank 0 result, with the machine's 1-minute load average
    before and after the run beside it, and the bytes each host sent on its
    link during the whole run (None without a cluster)."""
    from fake_cluster import ENV
    from mpi_harness import mpiexec_path, rank_env

    ranks = sum(slots)
    cmd = [mpiexec_path(), *(cluster.mpiexec_args(slots) if cluster else []), "-n", str(ranks),
           *this_script(__file__, *argv, *(["--on-fake-hosts"] if cluster else []))]
    what = " ".join(cmd)
    hosts = range(len(slots)) if cluster else ()
    before = [cluster.tx_bytes(i) for i in hosts]
    env = rank_env({**(ENV if cluster and tcp else {}), **env})
    if cluster and not tcp:
        env.pop("UCX_TLS", None)
    print("$", what, flush=True)
    with load_span() as load:  # other work on the machine, reported beside the numbers
        if cluster:
            text = check(cluster.run(0, cmd, env=env, timeout=RUN_TIMEOUT_S, cwd=REPO), what)
        else:
            text = run(cmd, env=env, timeout=RUN_TIMEOUT_S, what=what)
    sent = [cluster.tx_bytes(i) - b for i, b in zip(hosts, before)] if cluster else None
    return {**result_in(text, what), "load_average_1min": load}, sent


def bench_bytes(args):
    from fake_cluster import FakeCluster

    with FakeCluster(2) as cluster:
        result, whole = launch(cluster, (1, 1), ["worker-exchange", "--ranks", ",".join(map(str, BYTES_RANKS)),
                                                 "--iterations", "3", "--warmup", "1"], {})
        # The control: without UCX_TLS=tcp,self, UCX finds both ranks on one machine and uses shared memory
        control, control_whole = launch(cluster, (1, 1), ["worker-exchange", "--ranks", "", "--iterations", "1",
                                                          "--warmup", "0", "--quiet-cores", "inf"], {}, tcp=False)
    result["run_link_bytes"] = whole
    result["without_ucx_tls_tcp"] = {"median_link_bytes": control["median_link_bytes"]["uncompressed"],
                                     "run_link_bytes": control_whole}
    result["note"] = ("link_bytes: bytes each host's eth0 sent during each exchange (two barriers included), "
                      "median over the iterations; run_link_bytes: FakeCluster.tx_bytes over the whole run "
                      "(start-up and every exchange, warm-up included); without_ucx_tls_tcp: one uncompressed "
                      "exchange in a run without UCX_TLS=tcp,self")
    plain = result["median_link_bytes"]["uncompressed"]
    for m, sent in result["median_link_bytes"].items():
        print(f"{m:>12}: {' / '.join(f'{b / 1e6:.2f} MB' for b in sent)} per host on the link "
              f"(allreduce input {result['allreduce_input_bytes'][m] / 1e6:.2f} MB), "
              f"{statistics.mean(plain) / statistics.mean(sent):.1f}x fewer than uncompressed")
    print("without UCX_TLS=tcp,self: " + " / ".join(f"{b / 1e6:.2f} MB" for b in
                                                     result["without_ucx_tls_tcp"]["median_link_bytes"]) +
          " per host for the uncompressed exchange")
    write_result("powersgd_link_bytes.json", result)


EXCHANGE_CONFIGURATIONS = (((2, 2), 2000), ((2, 2), 10000), ((4,), None), ((1, 1), 2000), ((1, 1), 10000))


def bench_exchange(args):
    """Each configuration a job of its own on fake hosts (one host: a
    single namespace, so that other work on the machine can be told apart;
    MPI left free to use shared memory there, as on a real host)."""
    from fake_cluster import FakeCluster

    argv = ["worker-exchange", "--ranks", ",".join(map(str, TIMED_RANKS)), "--iterations", str(args.iterations),
            "--quiet-cores", str(args.quiet_cores)]
    env = {"MXPLUGIN_HIERARCHICAL_ALLREDUCE": "1"}
    rows = []
    if args.only:  # the other configurations' rows are kept as they are
        rows = read_result("powersgd_exchange.json")["configurations"]
    for slots, rate in EXCHANGE_CONFIGURATIONS:
        layout = f"{len(slots)} host{'s' if len(slots) > 1 else ''} x {slots[0]}"
        if args.only and args.only != layout.replace(" hosts x ", "x").replace(" host x ", "x"):
            continue
        with FakeCluster(len(slots), rate_mbit=rate) as cluster:
            result, whole = launch(cluster, slots, argv, env, tcp=len(slots) > 1)
        row = {"layout": layout, "link": f"{rate / 1000:g} Gbit/s" if rate else "none", "rate_mbit": rate,
               "measured": time.strftime("%Y-%m-%d %H:%M"), "run_link_bytes": whole, **result}
        at = [i for i, r in enumerate(rows) if (r["layout"], r["rate_mbit"]) == (layout, rate)]
        if at:
            rows[at[0]] = row
        else:
            rows.append(row)
    ms = lambda v: "n/a" if v is None else f"{v * 1e3:.0f} ms"  # noqa: E731
    for row in rows:
        med, plain = row["median_s"], row["median_s"]["uncompressed"]
        print(f"{row['layout']}, {row['link']:>8} (quiet samples {row['quiet_samples']}): uncompressed {ms(plain)}, " +
              ", ".join(f"rank {r} {ms(med[str(r)])}" + (f" ({med[str(r)] / plain:.2f}x)" if plain and med[str(r)]
                                                         else "") for r in TIMED_RANKS))
    write_result("powersgd_exchange.json", {"configurations": rows})


def bench_step(args):
    from fake_cluster import FakeCluster

    with FakeCluster(2, rate_mbit=2000) as cluster:
        result, whole = launch(cluster, (1, 1), ["worker-step", "--rounds", str(args.rounds), "--steps",
                                                 str(args.steps), "--batch-size", str(args.batch_size),
                                                 "--image-size", str(args.image_size), "--quiet-cores",
                                                 str(args.quiet_cores)], {})
    result.update({"link": "2 Gbit/s", "rate_mbit": 2000, "run_link_bytes": whole})
    for key in ("", "_all_samples"):
        med, eff = result[f"median_step_s{key}"], result.get(f"efficiency{key}", {})
        print(f"{'quiet samples' if not key else 'all samples'} ({result['quiet_samples'] if not key else ''}): " +
              ", ".join(f"{m} {v * 1e3:.0f} ms" for m, v in med.items() if v) + "; efficiency " +
              ", ".join(f"{m} {e:.3f}" for m, e in eff.items()))
    write_result("powersgd_step.json", result)


def main():
    p = arguments(__doc__, warmup=(2, "worker-exchange: warm-up iterations"), rounds=(12, "step: measured rounds"),
                  steps=(1, "step: steps per round and method"))
    p.add_argument("what", choices=["all", "bytes", "exchange", "step", "worker-exchange", "worker-step"])
    p.add_argument("--ranks", default="4", help="worker-exchange: PowerSGD ranks")
    p.add_argument("--iterations", type=int, default=7, help="exchange: measured iterations (default 7)")
    p.add_argument("--only", metavar="HOSTSxRANKS",
                   help="exchange: measure only the configurations of this layout (2x2, 1x4 or 2x1), replacing "
                        "their rows in bench/results/powersgd_exchange.json")
    p.add_argument("--batch-size", type=int, default=8, help="step: batch per rank (default 8)")
    p.add_argument("--image-size", type=int, default=112, help="step: image side (default 112)")
    p.add_argument("--quiet-cores", type=float, default=0.2,
                   help="workers: the samples counted are those during which other work (processes outside the "
                        "fake hosts) kept fewer cores busy than this (default 0.2); the medians of all samples "
                        "are recorded too")
    p.add_argument("--on-fake-hosts", action="store_true",
                   help="workers: count the bytes sent on the fake host's link and the other work on the machine")
    args = p.parse_args()
    if args.what == "worker-exchange":
        return exchange_worker([int(r) for r in args.ranks.split(",") if r], args.iterations, args.warmup,
                               args.on_fake_hosts, args.quiet_cores)
    if args.what == "worker-step":
        return step_worker(args.rounds, args.steps, args.batch_size, args.image_size, args.quiet_cores)
    from fake_cluster import FakeCluster

    why_not = FakeCluster.unavailable()
    if why_not:
        raise SystemExit(f"bench/powersgd_hosts.py: fake-host cluster: {why_not}")
    for what, bench in (("bytes", bench_bytes), ("exchange", bench_exchange), ("step", bench_step)):
        if args.what in ("all", what):
            bench(args)


if __name__ == "__main__":
    main()
