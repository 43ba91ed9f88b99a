"""A model that does not fit without sharded optimizer states, and trains
with them, under one memory limit (a cgroup v1 memory controller; needs
root).

    python bench/sharding_oom.py [--ranks 3] [--width 4096]

The wide MLP of `bench/sharding.py fit` (4 Dense layers of width x width,
Adam) is first trained with and without sharded states, each job (the
launcher and its ranks) in a memory cgroup of its own with no limit, to
measure the job's peak memory; then both again with the limit set halfway
between the two peaks. Without sharding the kernel's OOM killer ends the
job; with sharding it trains. Results: bench/results/sharding_oom.json.
"""
import json
import os
import subprocess
import sys
import time

from harness import HERE, arguments, write_result

CGROUPS = "/sys/fs/cgroup/memory"


class MemoryCgroup:
    """A memory cgroup of this script's own, removed at the end."""

    def __init__(self, name):
        self.path = os.path.join(CGROUPS, f"mxplugin_bench_{os.getpid()}_{name}")
        os.mkdir(self.path)

    def write(self, field, value):
        with open(os.path.join(self.path, field), "w") as f:
            f.write(str(value))

    def read(self, field):
        with open(os.path.join(self.path, field)) as f:
            return int(f.read().split()[0])

    def remove(self):
        for _ in range(50):  # the killed job's processes leave the group moments after
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def run(ranks, width, shard, limit):
    """(exit code, peak bytes of the job, output) of one training job."""
    group = MemoryCgroup(f"{'sharded' if shard else 'full'}_{limit or 'nolimit'}")
    try:
        if limit:
            group.write("memory.limit_in_bytes", limit)
        argv = [sys.executable, "-m", "mxplugin_run", "-np", str(ranks), sys.executable,
                os.path.join(HERE, "sharding.py"), "fit", "--shard", str(int(shard)), "--width", str(width)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=lambda: group.write("cgroup.procs", os.getpid()), timeout=600)
        return proc.returncode, group.read("memory.max_usage_in_bytes"), proc.stdout
    finally:
        group.remove()


def main():
    parser = arguments(__doc__)
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--width", type=int, default=4096)
    args = parser.parse_args()
    if not os.access(CGROUPS, os.W_OK):
        raise SystemExit(f"needs a writable cgroup v1 memory controller at {CGROUPS} (root)")
    record = {"ranks": args.ranks, "width": args.width, "parameters": 4 * (args.width * args.width + args.width)}
    peaks = {}
    for shard in (False, True):
        code, peak, out = run(args.ranks, args.width, shard, None)
        if code != 0:
            raise SystemExit(f"unlimited run (sharded={shard}) failed:\n{out}")
        peaks[shard] = peak
    limit = (peaks[False] + peaks[True]) // 2
    record.update(peak_bytes_unsharded=peaks[False], peak_bytes_sharded=peaks[True], limit_bytes=limit)
    for shard in (False, True):
        code, peak, out = run(args.ranks, args.width, shard, limit)
        key = "sharded" if shard else "unsharded"
        record[f"{key}_exit_code"] = code
        record[f"{key}_trained"] = "trained " in out
        record[f"{key}_tail"] = out.strip().splitlines()[-3:]
    print(json.dumps(record, indent=1))
    write_result("sharding_oom.json", record)


if __name__ == "__main__":
    main()
