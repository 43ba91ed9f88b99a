"""Hosts an elastic job leaves out after a fault, each until its cool-down
ends (Note [Cool-downs])."""
import threading
import time

# Note [Cool-downs]: a rank lost on a host says little about the host's
# future: an OOM kill, a rebooted switch or a preempted container pass.
# Leaving the host out for good would shrink a long job with every transient
# fault. So a host is left out for a cool-down, then probed through the
# remote shell and tried again if it answers (one still cut off is left out
# again, as for a new fault). A host that fails again waits twice as long
# each time, up to the range's upper end, so one that keeps failing costs
# few worlds. The range is horovodrun's --blacklist-cooldown-range; "inf
# inf" leaves hosts out for good (what horovodrun does without the option).
DEFAULT_COOLDOWN_RANGE = (30.0, 600.0)


def cooldown_for(faults, cooldown_range):
    """Seconds a host is left out after its `faults`-th fault (1, 2, ...)."""
    low, high = cooldown_range
    return min(high, low * 2 ** (faults - 1))


class LeftOutHosts:
    """Which hosts are cooling down now, and why. Shared by the launcher's
    main thread (worlds) and its host watcher, hence the lock."""

    def __init__(self, cooldown_range=DEFAULT_COOLDOWN_RANGE, clock=time.monotonic):
        self.cooldown_range, self.clock = cooldown_range, clock
        self.lock = threading.Lock()
        self.faults = {}  # host -> faults so far, for the back-off
        self.until = {}  # host -> (clock time its cool-down ends, why)

    def leave_out(self, host, why):
        """Leaves `host` out after a fault; returns its cool-down in seconds."""
        with self.lock:
            self.faults[host] = self.faults.get(host, 0) + 1
            seconds = cooldown_for(self.faults[host], self.cooldown_range)
            self.until[host] = (self.clock() + seconds, why)
            return seconds

    def now(self):
        """{host: why} for the hosts still cooling down."""
        with self.lock:
            return {host: why for host, (end, why) in self.until.items() if self.clock() < end}

    def take_returned(self):
        """[(host, why it was left out, faults)] for the hosts whose
        cool-down ended since the last call (each reported once)."""
        with self.lock:
            back = [(host, why, self.faults[host]) for host, (end, why) in self.until.items()
                    if self.clock() >= end]
            for host, _, _ in back:
                del self.until[host]
            return back


def describe_cooldown(seconds):
    return "for good" if seconds == float("inf") else f"for {seconds:g} s"


def parse_cooldown_range(values):
    """--blacklist-cooldown-range MIN MAX -> (min, max); raises ValueError."""
    try:
        low, high = (float(v) for v in values)
    except ValueError:
        low, high = 1.0, 0.0  # refused below
    if not 0 <= low <= high:
        raise ValueError(f"--blacklist-cooldown-range {values[0]} {values[1]}: expected 0 <= MIN <= MAX seconds")
    return low, high
