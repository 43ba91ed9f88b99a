"""Fuzz of the public collectives (issue 38): seeded random calls, valid
and bad, the same on every rank or off on one (fuzz_cases.py says which).
Each call either works, with the numbers NumPy gives, or raises a clear
exception on every rank that called it, naming what was wrong (the odd
rank's argument, or the call and the odd rank); a valid allreduce after
every case shows the library still works and that the ranks agree on how
the case went. Nothing may crash or hang: the harness's HANG_S is the only
bound (Note [Hang limits]); errors come from the checks and negotiation
(their messages), never from the stall shutdown, which the test sets far
beyond HANG_S.

MXPLUGIN_FUZZ_SEED: the seed (an integer, or "random"; default 38).
MXPLUGIN_FUZZ_CASES: how many cases (default 300). MXPLUGIN_FUZZ_FIRST:
the first case's index (to rerun a failing case: its index as the first,
one case). Rank 0 prints each case before it runs it and a summary line:
"fuzz: seed S, N cases: W worked, E refused on every rank, O refused on the
outsider only"."""
import os
import sys
import time
import traceback

from common import finish, hvd, mx, np, say, start

from fuzz_calls import Call, check, read
from fuzz_cases import REFUSALS, Case
from fuzz_data import FuzzBug

STALL_TEXTS = ("was never submitted", "STALL_SHUTDOWN", "lost contact")

r, n = start()
setting = os.environ.get("MXPLUGIN_FUZZ_SEED", "38")
seed = int(np.random.SeedSequence().entropy % 2 ** 31) if setting == "random" else int(setting)
seed = hvd.broadcast_object(seed, root_rank=0, name="fuzz.seed")
cases = int(os.environ.get("MXPLUGIN_FUZZ_CASES", "300"))
first = int(os.environ.get("MXPLUGIN_FUZZ_FIRST", "0"))
if r == 0:
    say(f"fuzz: seed {seed} (MXPLUGIN_FUZZ_SEED={seed} MXPLUGIN_FUZZ_FIRST={first} MXPLUGIN_FUZZ_CASES={cases} "
        f"reproduce it), {n} ranks")

# Process sets registered on every rank in one order; cases add and remove others.
subsets = [[0, 1], [1, 2], [2]] if n >= 3 else [[1]] if n == 2 else []
sets = [hvd.add_process_set(s) for s in subsets]


# What a mismatch's message says differed, by what the odd rank changed (a
# tuple: any of these). allgather's own check describes dtypes and dimensions.
DIFFERED = {"shape": "shape", "dtype": ("dtype", "Mismatched allgather"), "op": "reduce op",
            "prescale": "prescale factor", "postscale": "postscale factor", "count": "Mismatched collectives",
            "kind": "Mismatched", "trailing": ("Mismatched allgather", "Mismatched shape"),
            "ndim": "Mismatched allgather", "root": "root rank"}


def has(message, requirement):
    return any(p in message for p in requirement) if isinstance(requirement, tuple) else requirement in message


def expected_parts(case):
    """What this rank's error message must contain."""
    role = case.role(r)
    if role == "outsider":
        return ["not a member"]
    if case.mode == "all_bad" or (case.mode == "one_bad" and role == "odd"):
        return [tuple(case.bad[2])]
    names = case.names_the_call()
    if case.kind in ("broadcast_object", "allgather_object"):
        names = [case.name or case.kind]
    if case.kind == "process_set":
        names = ["Mismatched control calls", "process set"]
    if case.kind == "broadcast_object" and case.mode == "mismatch":
        names.append("root rank")
    if getattr(case, "mismatch", None):
        names.append(DIFFERED[case.mismatch])
    return names + [f"rank {case.odd}"]


def judge(case, call, outcome, error, values):
    """'' when this rank's outcome is what the contract says, else the problem."""
    if outcome == "work" and case.expect == "work":
        try:
            check(call, values)
        except AssertionError as e:
            return f"wrong result: {e}"
        return ""
    if outcome == "work":
        return "worked, but every rank should have raised"
    where = traceback.extract_tb(error.__traceback__)[-1]
    text = f"{type(error).__name__}: {error} (from {os.path.basename(where.filename)}:{where.lineno})"
    if case.expect == "work":
        return f"raised, but should have worked: {text}"
    if not isinstance(error, REFUSALS):
        return f"raised {type(error).__module__}.{type(error).__name__}, not one of mxplugin's errors: {text}"
    if any(s in str(error) for s in STALL_TEXTS):
        return f"a stall or lost peer, not the call's own error: {text}"
    missing = [p for p in expected_parts(case) if not has(str(error), p)]
    if missing:
        return f"the message does not name {missing}: {text}"
    return ""


def agree(problem, index):
    """A valid allreduce over every rank after each case: the library works,
    and every rank learns whether any had a problem."""
    out = hvd.allreduce(mx.nd.array([1.0 if problem else 0.0, r + 1.0], dtype="float64"), op=hvd.Sum,
                        name="fuzz.agree")
    got = out.asnumpy()
    assert got[1] == n * (n + 1) / 2, f"rank {r}: the allreduce after case {index} gave {got}"
    return int(got[0])


counts = {"work": 0, "refuse": 0, "outsider": 0}
failed = 0
t0 = time.time()
for index in range(first, first + cases):
    case = Case(seed, index, r, n, sets)
    if r == 0:
        say(case.text)
    call = Call(case)
    outcome, error, values = "skip", None, None
    if case.role(r) != "idle":
        try:
            values = read(call.run())
            outcome = "work"
        except FuzzBug:
            raise
        except Exception as e:  # noqa: BLE001 -- which exceptions are allowed is judged below
            outcome, error = "refuse", e
    problem = judge(case, call, outcome, error, values) if outcome != "skip" else ""
    if problem:
        say(f"FUZZ PROBLEM rank {r}, {case.text}: {problem}")
    call.cleanup()
    failed = agree(problem, index)
    if failed:
        break
    counts["outsider" if case.mode == "outsider" else case.expect if case.role(r) != "idle" else
           ("work" if case.mode == "valid" else "refuse")] += 1
if r == 0:
    say(f"fuzz: seed {seed}, {index - first + 1} cases: {counts['work']} worked, {counts['refuse']} refused on "
        f"every rank, {counts['outsider']} refused on the outsider only ({time.time() - t0:.1f} s)")
if failed:
    mx.nd.waitall()
    hvd.shutdown()
    sys.exit(f"rank {r}: the fuzz found a problem in case {index} on {failed} rank(s) (seed {seed})")
finish()
