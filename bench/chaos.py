"""The chaos run of issue 38 in numbers (tests/chaos.py): one elastic job on
4 fake hosts through many faults of every kind, its record written under
"chaos" in bench/results/reliability.json (the file's other entries kept),
rendered into docs/reliability.md by bench/report_reliability.py. Needs
root (network namespaces, the kernel's process events).

    python bench/chaos.py                    # 12 faults, a random seed (printed)
    python bench/chaos.py --faults 20 --seed 7

Exits 1 when the run found a problem (the record, written all the same,
lists them)."""
import os
import random
import sys

from harness import REPO, arguments, read_result, write_result
import machine

sys.path.insert(0, os.path.join(REPO, "tests"))  # `chaos` is tests/chaos.py, not this file
import chaos  # noqa: E402

NAME = "reliability.json"


def measure(faults, seed, peer_timeout_s):
    """The chaos run's record, with the machine it ran on."""
    why = chaos.unavailable()
    if why:
        raise SystemExit(f"chaos: cannot run here: {why}")
    record = chaos.run_chaos(faults, seed, peer_timeout_s, say=lambda text: print(text, flush=True))
    record["machine"] = machine.facts()
    return record


def main():
    parser = arguments(__doc__)
    parser.add_argument("--faults", type=int, default=12, help="faults in the run (default 12)")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 30),
                        help="the schedule's seed (default: random, printed)")
    parser.add_argument("--peer-timeout", type=int, default=chaos.PEER_TIMEOUT_S,
                        help=f"the ranks' MXPLUGIN_PEER_TIMEOUT_SECONDS (default {chaos.PEER_TIMEOUT_S})")
    args = parser.parse_args()
    record = measure(args.faults, args.seed, args.peer_timeout)
    result = read_result(NAME) or {}
    result["chaos"] = record  # its own "machine"; the file's stays that of the figures beside it
    write_result(NAME, result)
    sys.exit(1 if record["problems"] else 0)


if __name__ == "__main__":
    main()
