"""A rank that runs one kind of collective in a loop, checking every result,
until a peer is killed under it (tests/kill_loop.py kills one): it must
then end with the clear error, never a crash, a hang or wrong numbers.

Usage: kill_target.py KIND SEED
  KIND: allreduce | grouped | allgather | broadcast | reducescatter
Prints "PID <rank> <pid>" and "READY <rank>" once a first call worked, then,
when a call fails, "CLEAR <rank> <error>" (the lost peer named) or
"UNCLEAR <rank> <error>"; its supervisor prints "STATUS <rank> exit <code>"
or "STATUS <rank> signal <n>". Run under mpiexec -disable-auto-cleanup."""
import os
import signal
import sys


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _forward(signum, frame):
    try:
        os.kill(_pid, signum)
    except ProcessLookupError:
        pass


# A supervisor reports how the rank ended and exits with a plain code:
# Hydra ends the whole job when a rank ends by a signal, even with
# -disable-auto-cleanup, which would hide how the survivors ended.
_rank = os.environ.get("PMI_RANK", "?")
_pid = os.fork()
if _pid:
    signal.signal(signal.SIGUSR1, _forward)  # Hydra's word to survivors of a failure
    _, _status = os.waitpid(_pid, 0)
    if os.WIFSIGNALED(_status):
        say(f"STATUS {_rank} signal {os.WTERMSIG(_status)}")
        os._exit(0)
    say(f"STATUS {_rank} exit {os.WEXITSTATUS(_status)}")
    os._exit(0)

from common import hvd, mx, np, start  # noqa: E402

from mxnet.base import MXNetError  # noqa: E402

from mxplugin import PeerFailureError  # noqa: E402

# What a survivor's error must say: the peer is lost (named), or the
# library shut down after that (later calls).
CLEAR = ("lost contact", "shut down", "cannot be reached")

kind, seed = sys.argv[1], int(sys.argv[2])
r, n = start()
say(f"PID {r} {os.getpid()}")
rng = np.random.RandomState(seed)
sizes = [1024, 16 * 1024, 256 * 1024, 1024 * 1024]  # elements: 4 KB to 4 MB of float32


def one_call(i):
    """One collective of `kind`; checks its numbers."""
    size = sizes[i % len(sizes)]
    x = mx.nd.full((size,), r + 1 + i % 7)
    if kind == "allreduce":
        out = hvd.allreduce(x, name=f"k.ar.{size}", op=hvd.Sum)
        expected = n * (n + 1) / 2 + n * (i % 7)
        ok = float(out[0].asscalar()) == expected and float(out[-1].asscalar()) == expected
    elif kind == "grouped":
        outs = hvd.grouped_allreduce([x, x * 2], name=f"k.gr.{size}", op=hvd.Sum)
        expected = n * (n + 1) / 2 + n * (i % 7)
        ok = float(outs[1][-1].asscalar()) == 2 * expected
    elif kind == "allgather":
        out = hvd.allgather(x, name=f"k.ag.{size}")
        ok = out.shape == (size * n,) and float(out[-1].asscalar()) == n + i % 7
    elif kind == "broadcast":
        out = hvd.broadcast(x, root_rank=i % n, name=f"k.bc.{size}")
        ok = float(out[-1].asscalar()) == i % n + 1 + i % 7
    else:
        out = hvd.reducescatter(x, name=f"k.rs.{size}", op=hvd.Sum)
        ok = float(out[0].asscalar()) == n * (n + 1) / 2 + n * (i % 7)
    if not ok:
        say(f"WRONG {r} call {i}: {kind} of {size} gave wrong numbers")
        os._exit(4)


i = 0
try:
    while True:
        one_call(int(rng.randint(0, 1000)) if i else 0)
        if i == 0:
            say(f"READY {r}")
        i += 1
except (MXNetError, PeerFailureError) as exc:
    text = " ".join(str(exc).split())
    clear = any(words in text for words in CLEAR)
    say(f"{'CLEAR' if clear else 'UNCLEAR'} {r} after {i} calls: {type(exc).__name__}: {text[:300]}")
    sys.exit(0 if clear else 3)
