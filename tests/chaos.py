"""A chaos run (issue 38, "Many faults, one job"): one elastic job on 4 fake
hosts (tests/fake_cluster.py; tests/chaos_job.py) goes through a seeded
random series of faults (tests/chaos_faults.py: a rank SIGKILLed; a rank
SIGSTOPped past the peer timeout, then let go; a host's link cut and
restored; every process of a host killed; a host dropped from discovery and
added back; a rank killed as a commit is made, and as a world starts), each
once the world running can take it, and training must resume after each.
Then the job is let finish, and what must hold is checked
(tests/chaos_checks.py): every world resumed from the newest commit, the
job reached its accuracy target, every rank's end explained: a clean exit,
the elastic exit code or a signal the run sent (the kernel's word,
tests/rank_processes.py; Note [Rank ends] in tests/chaos_checks.py, each
rank's end in the record's "ranks", with the evidence where it is not),
nothing left running (no process, socket or shared-memory segment of the
job).

    python tests/chaos.py --faults 12 [--seed S] [--out FILE]

The seed is printed; MXPLUGIN_CHAOS_SEED (or --seed) replays a run's
schedule (the moments the faults land vary with the machine). run_chaos()
returns the record: the faults with the time training took to resume after
each (and to train on the host hit again), the resets, the worlds'
resumes, the final accuracy and the problems found (none when the run
passed). Used by tests/test_chaos.py (a short run) and bench/chaos.py."""
import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rank_processes  # noqa: E402
from chaos_checks import (final_accuracy, job_segments, nothing_running, phases_of, rank_ends,  # noqa: E402
                          rank_records, remove_segments, resumes, segments_left)
from chaos_faults import KINDS  # noqa: E402
from chaos_job import MIN_ACCURACY, ChaosError, ChaosJob, COOLDOWN_RANGE  # noqa: E402
from chaos_log import RESET, STEP, COMMIT, worlds  # noqa: E402
from fake_cluster import FakeCluster  # noqa: E402

NUM_HOSTS = 4
PEER_TIMEOUT_S = 10
EPOCHS = 2  # then on, an epoch at a time, until the faults are done


def unavailable():
    """Why a chaos run cannot be made here, or None."""
    return FakeCluster.unavailable() or rank_processes.unavailable()


def seed_from_environment():
    seed = os.environ.get("MXPLUGIN_CHAOS_SEED")
    return int(seed) if seed else random.SystemRandom().randrange(1 << 30)


def schedule(faults, rng, pool=None):
    """`faults` fault kinds in random order: every kind once while the
    count allows, the rest drawn at random (from `pool`, a list of kinds
    in which a kind may repeat to weigh more; default every kind once)."""
    kinds = list(KINDS)
    chosen = rng.sample(kinds, min(faults, len(kinds)))
    chosen += [rng.choice(pool or kinds) for _ in range(faults - len(chosen))]
    rng.shuffle(chosen)
    return chosen


def run_chaos(faults, seed, peer_timeout_s=PEER_TIMEOUT_S, say=print, log_path=None, pool=None):
    """Runs the job through `faults` faults drawn with `seed` (and `pool`,
    see schedule); the record. With `log_path`, the job's whole output is
    written there, each line with its time (seconds from the launcher's
    start)."""
    rng = random.Random(seed)
    planned = schedule(faults, rng, pool)
    say(f"chaos: seed {seed} (MXPLUGIN_CHAOS_SEED), {faults} faults: {', '.join(planned)}")
    with FakeCluster(NUM_HOSTS) as cluster:
        job = ChaosJob(cluster, peer_timeout_s, EPOCHS)
        waited = None
        try:
            done, problems = _inject(job, planned, rng, say)
            code = _finish(job, problems)
            if code is not None:  # else the cluster's end kills what is left
                found, waited = nothing_running(cluster)  # while the ranks' ends are still recorded
                problems += found
        finally:
            job.close()
            if job.proc.poll() is None:  # the run failed: the cluster's end kills what is left
                job.proc.kill()
        lines = job.lines()
        if log_path:
            with open(log_path, "w") as f:
                f.writelines(f"{when - job.started:8.2f} {text}\n" for when, text in lines)
        record = {"seed": seed, "faults_planned": faults, "hosts": NUM_HOSTS, "peer_timeout_s": peer_timeout_s,
                  "cooldown_range_s": [float(v) for v in COOLDOWN_RANGE],
                  "duration_s": round(time.monotonic() - job.started, 1),
                  "faults": [_timings(f, lines, job.started) for f in done],
                  "resets": sum(1 for _, t in lines if RESET.match(t)),
                  "steps": max((int(m.group(1)) for m in (STEP.match(t) for _, t in lines) if m), default=0),
                  "commits": max((int(m.group(1)) for m in (COMMIT.match(t) for _, t in lines) if m), default=0)}
        record.update(_checks(job, lines, code, problems))
        record["ranks"] = rank_records(job.ranks.all_ranks, job.injected, done, job.killed_with_host, lines,
                                       job.started)  # Note [Rank ends]
        record["rank_causes"] = tally(r["cause"] for r in record["ranks"])
        record["leftovers_gone_after_s"] = None if waited is None else round(waited, 1)
    if record["problems"]:
        record["output"] = [t for _, t in lines if not STEP.match(t) and not COMMIT.match(t)][-200:]
        record["output_near_signal_ends"] = _near_signal_ends(job, lines)
    say(f"chaos: {summary(record)}")
    return record


def _near_signal_ends(job, lines):
    """For each rank that a signal it was not sent ended: every line of the
    job's output from 3 s before its end to 1 s after (what it or MPICH said
    as it went, e.g. an abort's message), timed from its end; the record's
    "output" keeps only the job's last lines."""
    near = {}
    for rank in job.ranks.all_ranks:
        how = rank.how or ""
        if how.startswith("signal ") and int(how.split()[1]) not in job.injected.get(rank.pid, ()):
            near[f"{rank.pid} on host {rank.host} ({how})"] = [
                f"{when - rank.ended:+.2f} {text}" for when, text in lines if -3.0 <= when - rank.ended <= 1.0]
    return near


def _inject(job, planned, rng, say):
    """Injects the faults `planned` in turn, each once training resumed
    after the one before; (their records, problems)."""
    done = []
    try:
        for n, kind in enumerate(planned, 1):
            fault = KINDS[kind](job, rng)
            done.append(fault)
            _, resumed = job.first_step_after(_World(fault["world"]))
            say(f"chaos: fault {n}/{len(planned)}: {kind} on {fault['host']} in world {fault['world']}: training "
                f"resumed {resumed - fault['at']:.1f} s later")
    except ChaosError as exc:
        return done, [str(exc)]
    return done, []


def _finish(job, problems):
    """Lets the job end; the launcher's exit code, None if it did not end."""
    try:
        code = job.finish()
    except ChaosError as exc:
        problems.append(str(exc))
        return None
    if code != 0:
        problems.append(f"the launcher exited {code}")
    return code


def _checks(job, lines, code, problems):
    """The checks of tests/chaos_checks.py over the run, once it has ended:
    the record's entries for what they measured, and "problems" (with
    `problems`)."""
    found, resumed = resumes(lines)
    problems = problems + found
    found, accuracy = final_accuracy(lines, MIN_ACCURACY)
    problems += found if code == 0 else []
    found, ends = rank_ends(job.ranks.all_ranks, job.injected, phases_of(lines))
    problems += found if code is not None else []
    if job.ranks.lost_events:
        problems.append(f"{job.ranks.lost_events} batches of process events lost: the ranks' ends are not all known")
    every, lost_with_host = job_segments(job.ranks.all_ranks, job.killed_with_host)
    problems += segments_left(every - lost_with_host) if code is not None else []
    left_by_lost_hosts = remove_segments(lost_with_host)
    remove_segments(every)  # leaks, if any, were reported above
    return {"worlds": resumed, "final_accuracy": accuracy, "rank_ends": ends,
            "segments_left_by_hosts_killed_whole": left_by_lost_hosts, "problems": problems}


def tally(values):
    """{value: how many times it came}."""
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


class _World:
    """A world known by its number only (first_step_after reads from the start)."""

    def __init__(self, number):
        self.number, self.index = number, 0


def _timings(fault, lines, start):
    """The fault's record with, from the job's output: seconds from the
    fault to the first step of the next world (recovered_s) and to the
    first step of a world on the host hit again (back_s)."""
    all_worlds = worlds(lines)
    later = [w for w in all_worlds if w.number > fault["world"] and w.first_step is not None]
    back = next((w for w in later if fault["host"] in w.hosts), None)
    timed = {k: v for k, v in fault.items() if k != "at"}
    timed["at_s"] = round(fault["at"] - start, 1)
    timed["recovered_s"] = round(later[0].first_step[1] - fault["at"], 1) if later else None
    timed["back_s"] = round(back.first_step[1] - fault["at"], 1) if back else None
    if fault["kind"] == "kill_in_commit":  # whether rank 0 still printed the commit as made, in that world
        hit = next(w for w in all_worlds if w.number == fault["world"])
        timed["commit_printed"] = any((m := COMMIT.match(t)) is not None and int(m.group(1)) == fault["commit"]
                                      for _, t in lines[hit.index:hit.end])
    return timed


def summary(record):
    recovered = [f["recovered_s"] for f in record["faults"] if f["recovered_s"] is not None]
    median = f"{statistics.median(recovered):.1f} s" if recovered else "-"
    verdict = "passed" if not record["problems"] else f"FAILED: {'; '.join(record['problems'])}"
    return (f"{len(record['faults'])} faults, {record['resets']} resets, median time to resume {median}, "
            f"final accuracy {record['final_accuracy']}, rank ends {record['rank_ends']}, {record['duration_s']} s: "
            f"{verdict}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=12, help="faults in the run (default 12)")
    parser.add_argument("--seed", type=int, default=None, help="default: $MXPLUGIN_CHAOS_SEED, else random")
    parser.add_argument("--peer-timeout", type=int, default=PEER_TIMEOUT_S,
                        help=f"the ranks' MXPLUGIN_PEER_TIMEOUT_SECONDS (default {PEER_TIMEOUT_S})")
    parser.add_argument("--out", help="write the record here (JSON)")
    parser.add_argument("--log", help="write the job's output here, each line with its time")
    args = parser.parse_args()
    why = unavailable()
    if why:
        sys.exit(f"chaos: cannot run here: {why}")
    seed = args.seed if args.seed is not None else seed_from_environment()
    record = run_chaos(args.faults, seed, args.peer_timeout, say=lambda text: print(text, flush=True),
                       log_path=args.log)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    sys.exit(1 if record["problems"] else 0)


if __name__ == "__main__":
    main()
