"""One rank's end as its agent saw it (Note [A rank's agent] in
rank_agent.py): how the process ended and where it was, as data. The agent
writes it as one line to its stderr (END_MARKER and JSON), where the plain
launcher reads it (rank_deaths.py), and an elastic rank's agent also posts
the end to the launcher's service (code=N or signal=N, phase=...)."""
import json
from dataclasses import asdict, dataclass
from typing import Optional

from mxplugin_run.phases import PHASES, STARTING
from mxplugin_run.protocol import EXIT_WORLD_CRASHED

# The line of an agent's end record: "<marker> <JSON of an EndRecord>".
END_MARKER = "mxplugin-rank-end"
# What the rank said last is kept to this many characters: the record's
# line stays one write a pipe never splits.
SAID_CHARS = 1000
# Signals that mean a process crashed (rather than was killed).
CRASH_SIGNALS = frozenset({4, 6, 7, 8, 11})
# Exit code of MXNet's own SIGSEGV handler.
EXIT_MXNET_CRASH = 255


@dataclass(frozen=True)
class ProcessEnd:
    """How a rank's process ended: an exit code or a signal. It travels as
    one query field, code=N or signal=N."""
    code: Optional[int] = None
    signal: Optional[int] = None

    def __post_init__(self):
        if (self.code is None) == (self.signal is None):
            raise ValueError(f"a process ends by an exit code or by a signal: code={self.code}, signal={self.signal}")

    @staticmethod
    def of_wait_status(status):
        """The end a raw wait status tells."""
        return ProcessEnd(signal=status & 0x7F) if status & 0x7F else ProcessEnd(code=(status >> 8) & 0xFF)

    @staticmethod
    def of_returncode(returncode):
        """The end Popen's returncode tells (-N: signal N)."""
        return ProcessEnd(signal=-returncode) if returncode < 0 else ProcessEnd(code=returncode)

    @staticmethod
    def from_query(query):
        """The end a request's query names, or None when it names none, or
        not as a number (the service refuses it)."""
        ends = [(name, query[name]) for name in ("code", "signal") if name in query]
        if len(ends) != 1 or not (ends[0][1].isascii() and ends[0][1].isdigit()):
            return None
        name, value = ends[0]
        return ProcessEnd(**{name: int(value)})

    @property
    def clean(self):
        return self.code == 0

    @property
    def crashed(self):
        """A crash signal, MXNet's crash exit, or MPI crashing under the core's thread."""
        return self.signal in CRASH_SIGNALS or self.code in (EXIT_MXNET_CRASH, EXIT_WORLD_CRASHED)

    def query(self):
        """The query field that carries this end."""
        return {"signal": str(self.signal)} if self.signal is not None else {"code": str(self.code)}

    def __str__(self):
        return f"signal {self.signal}" if self.signal is not None else f"code {self.code}"


@dataclass(frozen=True)
class EndRecord:
    """A rank's end: which rank (None where the process manager named
    none), where, its pid, when (the agent's clock, seconds since the
    epoch), how, the phase it had said last, and its last line on stderr."""
    rank: Optional[int]
    host: str
    pid: int
    time: float
    end: ProcessEnd
    phase: str = STARTING
    said: str = ""

    def line(self):
        """The record as the agent writes it (one line, with its newline)."""
        fields = asdict(self)
        fields.update(fields.pop("end"))
        fields = {name: value for name, value in fields.items() if value is not None or name == "rank"}
        fields["said"] = self.said[-SAID_CHARS:]
        return f"{END_MARKER} {json.dumps(fields, ensure_ascii=True)}\n"

    @staticmethod
    def parse(text):
        """The record in line `text` (it may carry a rank's tag or partial
        line before the marker), or None when it holds none or a broken one."""
        at = text.find(END_MARKER + " ")
        if at < 0:
            return None
        try:
            fields = json.loads(text[at + len(END_MARKER) + 1:])
            end = ProcessEnd(code=fields.get("code"), signal=fields.get("signal"))
            rank = fields.get("rank")
            record = EndRecord(rank=None if rank is None else int(rank), host=str(fields["host"]),
                               pid=int(fields["pid"]), time=float(fields["time"]), end=end,
                               phase=str(fields.get("phase", STARTING)), said=str(fields.get("said", "")))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return record if record.phase in PHASES else None

