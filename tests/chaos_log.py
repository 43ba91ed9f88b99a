"""The output of an elastic job of examples/mxnet_elastic_digits.py (run
with --log-steps), read as what happened: its worlds, steps, commits and
resumes. Shared by the chaos run's driver (tests/chaos.py), which waits on
it while the job runs, and its checks (tests/chaos_checks.py), which read
it whole afterwards."""
import re
import time

# The launcher's lines.
WORLD = re.compile(r"^mxplugin-run: elastic: world (\d+): (\d+) ranks? on (\S+)$")
# Note [Hosts a world cannot start on] (mxplugin_run/elastic/start_failures.py).
WORLD_NOT_STARTED = re.compile(r"^mxplugin-run: elastic: world (\d+) could not start on ")
# Note [Hosts that cannot reach the launcher] (mxplugin_run/elastic/driver.py).
CANNOT_REACH_BACK = re.compile(r"^mxplugin-run: elastic: (\S+)'s cool-down is over but it cannot reach the launcher: ")
RESET = re.compile(r"^mxplugin-run: elastic: (world (\d+): .*); reset (\d+)(?: of at most \d+)?, starting a new world$")
# Rank 0's lines (the example's and the elastic runner's).
STEP = re.compile(r"^step (\d+): epoch (\d+), (\d+) ranks")
COMMIT = re.compile(r"^commit (\d+): step (\d+)")
COMMITTING = re.compile(r"^committing (\d+): states digest ([-\d.]+)")
MADE_AT_HOSTS_CHANGE = re.compile(r"hosts changed: ending this world at commit (\d+)$")
RESUMED_FROM = re.compile(r"world (\d+) of (\d+) ranks resumes from commit (\d+) \((.*)\)$")
FINAL = re.compile(r"final test accuracy ([\d.]+)")
# The digits MLP ends its epochs between 0.94 and 0.97 once past its
# eighth, at 2 to 4 ranks (a constant lr, 0.05 a rank: the test set's 360
# images move it by 0.003 each, epoch to epoch; 0.92 has been seen in an
# early epoch, 0.944 after a CI run's 8th at 2 ranks): the target is what
# such a run always reaches.
MIN_ACCURACY = 0.93


def reached_accuracy(text):
    """Whether the job's output `text` says it ended at MIN_ACCURACY or better."""
    said = FINAL.findall(text)
    return bool(said) and float(said[-1]) >= MIN_ACCURACY
# Every rank's line after a reset (the example's reset callback).
RANK_RESUMES = re.compile(r"rank (\d+) of (\d+) resumes at step (\d+), weights digest ([-\d.]+)")


def world_hosts(match):
    """The host names of a WORLD line's match, in rank order."""
    return [entry.rsplit(":", 1)[0] for entry in match.group(3).split(",")]


def wait_line(log, predicate, start, timeout):
    """(index, time, text) of the first line of `log` (a fake_cluster
    LineLog) from index `start` on for which predicate(text) holds, waiting
    up to `timeout` seconds; None when the output ends or time runs out."""
    deadline = time.monotonic() + timeout
    i = start
    with log.cond:
        while True:
            while i < len(log.lines):
                when, text = log.lines[i]
                if predicate(text):
                    return i, when, text
                i += 1
            left = deadline - time.monotonic()
            if log.closed or left <= 0:
                return None
            log.cond.wait(left)


class World:
    """One world as the output tells it: its number, hosts (names, in rank
    order), the index and time of its launcher line, and, once seen, its
    first step (index, time, step number)."""

    def __init__(self, number, hosts, index, when):
        self.number, self.hosts, self.index, self.when = number, hosts, index, when
        self.first_step = None
        self.end = None  # index of the next world's line


def worlds(lines):
    """[World] of `lines` ([(time, text)]), in order."""
    found = []
    for i, (when, text) in enumerate(lines):
        m = WORLD.match(text)
        if m:
            if found:
                found[-1].end = i
            found.append(World(int(m.group(1)), world_hosts(m), i, when))
        elif found and found[-1].first_step is None:
            s = STEP.match(text)
            if s and int(s.group(3)) == len(found[-1].hosts):
                found[-1].first_step = (i, when, int(s.group(1)))
    return found


def commit_steps(lines):
    """{commit: step} for every commit rank 0 began (a "committing" line):
    its step is the last step printed before it. A commit rank 0 printed as
    made ("commit C: step S") gives S."""
    steps, last_step = {}, None
    for _, text in lines:
        s = STEP.match(text)
        if s:
            last_step = int(s.group(1))
            continue
        c = COMMITTING.match(text)
        if c and last_step is not None:
            steps.setdefault(int(c.group(1)), last_step)
        c = COMMIT.match(text)
        if c:
            steps[int(c.group(1))] = int(c.group(2))
    return steps


def newest_commits(lines):
    """(newest commit rank 0 said it made, newest commit begun) in `lines`;
    -1 where there is none. A commit at which the hosts changed is said made
    by the line that ends its world, not by a "commit" line; one a later
    world resumed from, by that world's line (its world may have ended
    inside the commit's host check, before rank 0 printed it)."""
    printed = [int(m.group(1)) for m in (COMMIT.match(t) or MADE_AT_HOSTS_CHANGE.search(t) for _, t in lines) if m]
    printed += [int(m.group(3)) for m in (RESUMED_FROM.search(t) for _, t in lines) if m]
    begun = [int(m.group(1)) for m in (COMMITTING.match(t) for _, t in lines) if m]
    return max(printed, default=-1), max(begun, default=-1)
