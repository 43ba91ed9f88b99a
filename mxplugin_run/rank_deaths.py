"""Which rank of a plain job died by a signal, said in one line instead of
MPICH's banner (Note [Naming the rank that died]).

Note [Naming the rank that died]: when a rank is killed (the OOM killer,
a segfault, a `kill -9`), MPICH's launcher stops the others and prints a
ten-line banner that names the process only by pid and host:

    =   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
    =   PID 29530 RUNNING AT node3
    =   EXIT CODE: 9
    ...
    YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)

The user wants the rank, and the banner cannot give it: its pid is the
first process its host's proxy started (rank 0 on one host, whichever rank
died), its exit code that process's; only its last line, the exit string,
is the job's: the first abnormal end's signal. So each rank starts behind
the line relay (line_relay.py), which execs the command in its own place
(the rank keeps the relay's pid) and whose output reader watches that pid
(a pidfd): when the command ends, it writes one line, RANK_MARKER with the
rank, pid and host, to stderr. The launcher keeps those lines out of the
job's output, notes their order, drops the banner and, after mpiexec ends,
says "rank 1 (pid 29530 on node3) ended first: the job was killed by
signal 9 (SIGKILL) ...": the rank that ended first is the one that died
(the others end only once mpiexec has learnt of it and stops them; each
relay says when it saw its command end, since the lines may arrive in
another order), unless
ranks had already finished normally, which the relay cannot tell from a
death (the line then names the first of them; the signal is still right).
The exit code is the shell's 128 + the signal, as after Ctrl-C (MPICH's own
is the bare signal number, which reads like a rank's exit code).

Note [Exits and kills]: the banner's signal is that of the ranks' raw wait
statuses ORed, not the first end's. A rank that fails (its peers' host cut
off, an uncaught exception after a collective failed) exits without
finalising MPI, and MPICH's proxy SIGKILLs its other ranks as after a crash:
a rank still in its own exit then makes the banner say "Killed (signal 9)"
(1 | 9), and the killed rank's relay may even see its end first. So each end
is told by what is known of it: a rank that calls exit() writes its code and
the time from a C exit handler (EXIT_MARKER, from _core.say_exit_code,
before the kernel tears the process down, so before the proxy hears of the
end), and the relay reads the raw wait status of a rank not yet reaped
(known for a kill, rarely for an exit). The first end not known to be a
clean exit 0 is the job's: an exit with its code ("... ended first: it
exited with code 1 without finishing MPI"), a signal with its signal; of an
end known in neither way, the banner's signal. MPICH does not always print
the banner there: when some ranks exit 1 and the others are killed, mpiexec
alone may just exit 1. So without a banner the line is said as well when a
rank said it exited with a nonzero code and fewer ranks said they exited
than the job has: the others were killed. Ranks that all finish MPI and
exit(3) all say so, and mpiexec's exit 3 stands alone, as it should."""
import re
import signal
import threading

from mxplugin_run.protocol import EXIT_MARKER, RANK_MARKER

_MARKER_LINE = re.compile(re.escape(RANK_MARKER) + r" (\S+) (\d+) (\S+)(?: ([\d.]+))?(?: (\d+|\?))?")
_EXIT_LINE = re.compile(re.escape(EXIT_MARKER) + r" (\d+) ([\d.]+) (-?\d+)")
_RULE = re.compile(r"^=+\s*$")
_BANNER_START = "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
_BANNER_PID = re.compile(r"^=\s+(?:RANK \d+ )?PID (\d+) RUNNING AT (\S+)")
_BANNER_CODE = re.compile(r"^=\s+EXIT CODE: (\d+)")
_BANNER_SIGNAL = re.compile(r"^YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*\(signal (\d+)\)")
_BANNER_END = "Please see the FAQ page for debugging suggestions"


def signal_name(number):
    """SIGKILL for 9; "signal N" for a number Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class RankDeaths:
    """Reads the job's output line by line (both streams, from the launcher's
    pumps): keeps the relays' rank lines and MPICH's banner out of it and
    remembers what they said."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ended = []  # [(when seen, arrival, rank, pid, host, raw wait status or None)] as the relays said so
        self.exits = {}  # pid -> (when, code) as ranks said when they called exit() (Note [Exits and kills])
        self.deaths = []  # [{pid, host, code, signal}] from each banner
        self.held = {}  # stream -> lines that may open a banner (a blank line, a rule)
        self.in_banner = {}  # stream -> what the banner being read said so far

    def reading(self, stream):
        """Whether lines of `stream` are held or a banner is being read."""
        return bool(self.held.get(stream)) or stream in self.in_banner

    def lines(self, stream, text):
        """The lines to print for `text` (one line with its newline) of
        `stream` ("out" or "err"): none, the line, or lines held before it."""
        marker = _MARKER_LINE.search(text)
        if marker:
            with self.lock:
                seen = float(marker.group(4)) if marker.group(4) else float("inf")
                status = int(marker.group(5)) if marker.group(5) not in (None, "?") else None
                self.ended.append((seen, len(self.ended), marker.group(1), int(marker.group(2)), marker.group(3),
                                   status))
            return []
        exited = _EXIT_LINE.search(text)
        if exited:
            with self.lock:
                self.exits[int(exited.group(1))] = (float(exited.group(2)), int(exited.group(3)))
            return []
        bare = text.rstrip("\r\n")
        banner = self.in_banner.get(stream)
        if banner is not None:
            self._read_banner(stream, banner, bare)
            return []
        held = self.held.setdefault(stream, [])
        if bare.startswith(_BANNER_START):
            held.clear()
            self.in_banner[stream] = {}
            return []
        if not bare.strip() or _RULE.match(bare):
            held.append(text)
            return []
        out = held + [text]
        held.clear()
        return out

    def _read_banner(self, stream, banner, bare):
        pid, code, sig = _BANNER_PID.match(bare), _BANNER_CODE.match(bare), _BANNER_SIGNAL.match(bare)
        if pid:
            banner.update(pid=int(pid.group(1)), host=pid.group(2))
        elif code:
            banner["code"] = int(code.group(1))
        elif sig:
            banner["signal"] = int(sig.group(1))
        elif bare.startswith(_BANNER_END):
            self._end_banner(stream)

    def _end_banner(self, stream):
        banner = self.in_banner.pop(stream)
        if "pid" in banner:
            with self.lock:
                self.deaths.append(banner)

    def flush(self, stream):
        """Lines held at the end of the output (they opened no banner); a
        banner cut short still counts."""
        if stream in self.in_banner:
            self._end_banner(stream)
        return self.held.pop(stream, [])

    def summary(self, ranks=None, returncode=0):
        """(one line, the exit code for the shell: 128 + the signal, else
        the code) or (None, None) when there was no banner and no end of
        the job's `ranks` ranks (mpiexec ended with `returncode`) is known
        to have stopped the others (Note [Exits and kills])."""
        with self.lock:
            deaths, ended, exits = list(self.deaths), list(self.ended), dict(self.exits)
        if not deaths:
            causes = [end for end in _ends(ended, exits, unrelayed=True) if end[5] != (None, 0)]
            return _summary_without_banner(causes, exits, ranks, returncode)
        death = deaths[0]
        sig, code = death.get("signal"), None
        ends = _ends(ended, exits)
        causes = [end for end in ends if end[5] != (None, 0)] or ends  # a clean exit 0 ended nothing
        if causes:
            _, _, rank, pid, host, known = min(causes)  # the first, by each rank's or relay's clock
            who = f"rank {rank} (pid {pid} on {host}) ended first"
            if known is not None:
                sig, code = known
        else:
            who = f"a rank on {death.get('host', '?')} ended"
        if sig is None and code is None:
            code = death.get("code", 1)
            return [f"{who}: the job ended with exit code {code} before finishing MPI; mpiexec stopped the "
                    "other ranks"], code
        return _said(who, sig, code)


def _ends(ended, exits, unrelayed=False):
    """Each end as [(when, arrival, rank, pid, host, (signal, exit code) or
    None)]: from the relays' lines, told by the rank's own exit line where
    there is one (Note [Exits and kills]); `unrelayed`: also an exit line
    whose relay line did not come (its relay was killed with it), by pid."""
    ends = []
    for seen, arrival, rank, pid, host, status in ended:
        if pid in exits:
            ends.append((exits[pid][0], arrival, rank, pid, host, (None, exits[pid][1])))
        elif status is not None:
            ends.append((seen, arrival, rank, pid, host, (status & 0x7F or None, status >> 8)))
        else:
            ends.append((seen, arrival, rank, pid, host, None))
    relayed = {end[3] for end in ends}
    for pid, (when, code) in exits.items() if unrelayed else ():
        if pid not in relayed:
            ends.append((when, len(ends), "?", pid, "?", (None, code)))
    return ends


def _summary_without_banner(causes, exits, ranks, returncode):
    """MPICH prints no banner for some jobs whose ranks it stopped (a rank
    exited 1 without finishing MPI, and the kill of the others came late
    enough not to be counted): the line is said when fewer of the job's
    `ranks` ranks said they exited than it has (the rest were killed) and
    the first end not known to be clean is known (an exit with its code, a
    signal). Ranks that all exit(3) after finishing MPI all say so:
    mpiexec's own exit 3, and no line."""
    if returncode == 0 or ranks is None or len(exits) >= ranks or not causes:
        return None, None
    _, _, rank, pid, host, known = min(causes)
    if known is None:  # the first end's cause is not known: the banner's signal would have told it
        return None, None
    return _said(f"rank {rank} (pid {pid} on {host}) ended first", *known)


def _said(who, sig, code):
    if sig is not None:
        return [f"{who}: the job was killed by signal {sig} ({signal_name(sig)}); mpiexec stopped the other "
                "ranks"], 128 + sig
    return [f"{who}: it exited with code {code} without finishing MPI; mpiexec stopped the other ranks"], code
