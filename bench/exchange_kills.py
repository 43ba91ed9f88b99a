"""How a survivor ends when a peer is SIGKILLed in the middle of a block
exchange, by MPI_Alltoallv and by one MPI_Sendrecv per peer (Note [Pairwise
exchange] in src/backend/mpi/ordered_reduce.cc):

    python bench/exchange_kills.py        # needs root (fake hosts)

Plain MPI (bench/exchange_kills.c, no mxplugin), 3 ranks on 3 fake hosts
(tests/fake_cluster.py, TCP between them, single copy off as in elastic
jobs), 4 MB per call; the last rank kills itself before a call that moves
from run to run. Jobs of the two patterns alternate, round after round. A
survivor should stay inside MPI until something outside ends it (mxplugin's
watchdog or launcher); one that ends by a signal is a crash. Each job is
given --wait seconds, then everything left is killed. With --load N, N
processes spin on the CPU meanwhile: the crash shows on a busy machine
(the suite's own load), rarely on an idle one. Writes
bench/results/exchange_kills.json.
"""
import collections
import os
import subprocess
import sys
import tempfile

from harness import HERE, REPO, arguments, write_result

sys.path.insert(0, os.path.join(REPO, "tests"))
from fake_cluster import ENV, FakeCluster  # noqa: E402
from mpi_harness import mpiexec_path  # noqa: E402

PATTERNS = ("alltoallv", "pairwise")
ELEMENTS = 1 << 20


def build(workdir):
    exe = os.path.join(workdir, "exchange_kills")
    mpicc = os.path.join(os.path.dirname(mpiexec_path()), "mpicc")
    subprocess.run([mpicc, "-O2", "-o", exe, os.path.join(HERE, "exchange_kills.c")], check=True)
    return exe


def survivors_ends(cluster, exe, pattern, kill_at, wait_s):
    """How the two survivors ended: "signal N", "exit N", or "still in MPI"."""
    argv = [mpiexec_path(), *cluster.mpiexec_args((1, 1, 1)), "-n", "3", "-disable-auto-cleanup", exe, pattern,
            str(ELEMENTS), str(kill_at)]
    env = {**os.environ, **ENV, "MPIR_CVAR_CH4_CMA_ENABLE": "0"}
    try:
        out = cluster.run(0, argv, env=env, timeout=wait_s).stdout
    except AssertionError as exc:  # timed out: the cluster killed what was left
        out = str(exc)
    ends = [line[4:] for line in out.splitlines() if line.startswith("END ") and line != "END signal 9"]
    return ends + ["still in MPI"] * (2 - len(ends))


def main():
    parser = arguments(__doc__, rounds=8, output="exchange_kills.json")
    parser.add_argument("--wait", type=float, default=12.0, help="seconds each job is given (default 12)")
    parser.add_argument("--load", type=int, default=2, help="processes spinning on the CPU meanwhile (default 2)")
    args = parser.parse_args()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        tally = run_rounds(args)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    crashed = {p: sum(n for end, n in c.items() if end.startswith("signal")) for p, c in tally.items()}
    write_result(args.output, {"ranks": 3, "hosts": 3, "bytes_per_call": ELEMENTS * 4, "rounds": args.rounds,
                               "load": args.load, "survivors": {p: dict(c) for p, c in tally.items()},
                               "crashed_survivors": crashed})


def run_rounds(args):
    """{pattern: Counter of the survivors' ends}."""
    tally = {p: collections.Counter() for p in PATTERNS}
    with tempfile.TemporaryDirectory() as workdir, FakeCluster(3) as cluster:
        exe = build(workdir)
        for i in range(args.rounds):
            for pattern in PATTERNS:
                for end in survivors_ends(cluster, exe, pattern, 10 + 7 * i, args.wait):
                    tally[pattern][end] += 1
                print(pattern, dict(tally[pattern]), flush=True)
    return tally


if __name__ == "__main__":
    main()
