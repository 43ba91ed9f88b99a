"""Faults and long jobs in numbers: the full versions of the reliability
tests (tests/test_reliability.py, tests/test_elastic_driver.py and
tests/test_fuzz.py run shortened ones), their figures written to
bench/results/reliability.json, rendered into docs/reliability.md by
bench/report_reliability.py.

    python bench/soak.py                       # everything, ~40 minutes on 2 cores
    python bench/soak.py --parts kills --kills 100
    python bench/soak.py --kill-results FILE   # a kill loop's records already run

Parts: kills (tests/kill_loop.py), resources (tests/spmd/check_flat_resources.py),
resets (tests/elastic_resets.py), service (the elastic service's request
fuzz), api (tests/spmd/check_fuzz.py, where present). Each part's result
replaces that part's entry in the result file; the others are kept."""
import ast
import json
import os
import random
import re
import subprocess
import sys

from harness import REPO, arguments, read_result, write_result

from mpi_harness import run_spmd, rank_env  # noqa: E402  (tests/, on the path through harness)

PARTS = ("kills", "resources", "resets", "service", "api")
NAME = "reliability.json"


def kills(args):
    if args.kill_results:
        with open(args.kill_results) as f:
            return json.load(f)
    out = os.path.join(REPO, "bench", "results", "kill_loop.tmp.json")
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "kill_loop.py"), "--kills", str(args.kills),
                    "--seed", str(args.seed), "--out", out], env=rank_env(), cwd=REPO, check=False)
    with open(out) as f:
        result = json.load(f)
    os.remove(out)
    return result


def _dicts(line):
    """The {...} figures a resources line holds, in order."""
    return [ast.literal_eval(m) for m in re.findall(r"\{[^{}]*\}", line)]


def resources(args):
    rc, out, err = run_spmd("check_flat_resources.py", 2, [args.small, args.grouped], timeout=7200)
    if rc != 0:
        raise SystemExit(f"check_flat_resources.py failed:\n{out[-3000:]}\n{err[-3000:]}")
    ranks = {}
    for line in re.findall(r"^resources: rank (\d+): (.*)$", out, re.M):
        small_base, small_peak, grouped_base, grouped_peak = _dicts(line[1])
        ranks[line[0]] = {"small": [small_base, small_peak], "grouped": [grouped_base, grouped_peak]}
    return {"small": args.small, "grouped": args.grouped, "ranks": ranks}


def resets(args):
    done = subprocess.run([sys.executable, os.path.join(REPO, "tests", "elastic_resets.py"), str(args.resets + 1)],
                          capture_output=True, text=True, env=rank_env(), cwd=REPO)
    line = next((line for line in done.stdout.splitlines() if line.startswith("resets:")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"elastic_resets.py failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    base, last, peak = _dicts(line)
    return {"resets": args.resets, "after_warm_up": base, "last": last, "peak": peak}


def _pytest_lines(test, env, prefix):
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", test], capture_output=True, text=True,
                          env=rank_env(env), cwd=REPO)
    # -s puts a test's first printed line after pytest's own "tests/x.py " on the same line
    lines = [line[line.index(prefix):] for line in done.stdout.splitlines() if prefix in line]
    return done.returncode == 0, lines


def service(args):
    passed, lines = _pytest_lines("tests/test_elastic_driver.py::"
                                  "test_the_service_refuses_malformed_oversized_replayed_and_wrong_token_requests",
                                  {"MXPLUGIN_FUZZ_REQUESTS": args.requests, "MXPLUGIN_FUZZ_SEED": args.seed},
                                  "service fuzz:")
    return {"requests": args.requests, "seed": args.seed, "passed": passed, "lines": lines}


def api(args):
    if not os.path.exists(os.path.join(REPO, "tests", "spmd", "check_fuzz.py")):
        return None
    passed, lines = _pytest_lines("tests/test_fuzz.py", {"MXPLUGIN_FUZZ_SEED": args.seed,
                                                         "MXPLUGIN_FUZZ_CASES": args.cases}, "fuzz:")
    return {"cases": args.cases, "seed": args.seed, "passed": passed, "lines": lines}


def main():
    parser = arguments(__doc__)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 30))
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--kill-results", help="the JSON of a kill loop already run (tests/kill_loop.py --out)")
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--grouped", type=int, default=2_000)
    parser.add_argument("--resets", type=int, default=30)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--cases", type=int, default=2000)
    args = parser.parse_args()
    result = read_result(NAME) if os.path.exists(os.path.join(REPO, "bench", "results", NAME)) else {}
    result.pop("machine", None)
    for part in args.parts:
        print(f"soak: {part}", flush=True)
        result[part] = globals()[part](args)
    write_result(NAME, result)


if __name__ == "__main__":
    main()
