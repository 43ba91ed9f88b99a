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
died), its exit code that process's, and its signal that of the ranks' raw
wait statuses ORed (a rank still in its own exit when the proxy SIGKILLs
it makes 1 | 9). So the launcher reads the end records of the ranks'
agents instead (Note [A rank's agent] in rank_agent.py: rank, pid, host,
time, the exit code or signal from the wait status), keeps them and the
banner out of the job's output and, after mpiexec ends, says "rank 1 (pid
29530 on node3) ended first: the job was killed by signal 9 (SIGKILL) ...":
the first end in time that is not a clean exit 0 is the job's (an agent
writes its record before MPICH hears of the end, so the others end only
later), an exit with its code ("... ended first: it exited with code 1
without finishing MPI"), a signal with its signal. The exit code is the
shell's 128 + the signal, as after Ctrl-C (MPICH's own is the bare signal
number, which reads like a rank's exit code). The banner's own word stands
only where no agent could tell (the agent itself was killed).

MPICH does not always print the banner: when a rank exits 1 without
finishing MPI and the proxy kills the others, mpiexec alone may just exit
1. So without a banner the line is said as well when mpiexec failed and
not every rank's end was a plain exit (some were killed: their agents died
with them, or told a signal). Ranks that all finish MPI and exit(3) all say
so, and mpiexec's exit 3 stands alone, as it should."""
import re
import signal
import threading

from mxplugin_run.process_end import END_MARKER, EndRecord

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
    pumps): keeps the agents' end records and MPICH's banner out of it and
    remembers what they said; `on_record`, if given, is called with each
    record as it comes."""

    def __init__(self, on_record=None):
        self.lock = threading.Lock()
        self.on_record = on_record
        self.records = []  # EndRecord, as the agents wrote them
        self.deaths = []  # [{pid, host, code, signal}] from each banner
        self.held = {}  # stream -> lines that may open a banner (a blank line, a rule)
        self.in_banner = {}  # stream -> what the banner being read said so far

    def reading(self, stream):
        """Whether lines of `stream` are held or a banner is being read."""
        return bool(self.held.get(stream)) or stream in self.in_banner

    def lines(self, stream, text):
        """The lines to print for `text` (one line with its newline) of
        `stream` ("out" or "err"): none, the line, or lines held before it."""
        if END_MARKER in text:
            record = EndRecord.parse(text)
            if record is not None:
                with self.lock:
                    self.records.append(record)
                if self.on_record is not None:
                    self.on_record(record)
                before = text[:text.find(END_MARKER)]  # a partial line the rank left, joined to it
                return [before + "\n"] if before.strip() else []
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
        to have stopped the others (Note [Naming the rank that died])."""
        with self.lock:
            deaths, records = list(self.deaths), list(self.records)
        causes = sorted((r for r in records if not r.end.clean), key=lambda r: r.time)
        if not deaths:
            all_exited = ranks is not None and len(records) >= ranks and all(r.end.signal is None for r in records)
            if returncode == 0 or all_exited or not causes:
                return None, None
        if causes:
            first = causes[0]
            who = f"rank {'?' if first.rank is None else first.rank} (pid {first.pid} on {first.host}) ended first"
            return _said(who, first.end.signal, first.end.code)
        death = deaths[0]
        who = f"a rank on {death.get('host', '?')} ended"
        if death.get("signal") is None:
            code = death.get("code", 1)
            return [f"{who}: the job ended with exit code {code} before finishing MPI; mpiexec stopped the "
                    "other ranks"], code
        return _said(who, death["signal"], None)


def _said(who, sig, code):
    if sig is not None:
        return [f"{who}: the job was killed by signal {sig} ({signal_name(sig)}); mpiexec stopped the other "
                "ranks"], 128 + sig
    return [f"{who}: it exited with code {code} without finishing MPI; mpiexec stopped the other ranks"], code
