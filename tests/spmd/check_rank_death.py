"""Rank 1 dies after a first successful allreduce; the survivors' next
allreduce must fail (lost contact) within bounded time, later ops must fail
promptly, and the survivors print PASS and exit by themselves.

Usage: check_rank_death.py exit|kill
  exit: rank 1 calls os._exit(1); kill: rank 1 SIGKILLs itself. Survivors
  leave through the ordinary interpreter exit (atexit shutdown, MPI clean-up).
Run with MXPLUGIN_PEER_TIMEOUT_SECONDS=5 under mpiexec -disable-auto-cleanup."""
import os
import signal
import sys
import time


def say(text):
    """One write per line: print() under PYTHONUNBUFFERED writes the text and
    the newline separately, and mpiexec can interleave two ranks' lines."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _forward(signum, frame):
    try:
        os.kill(_pid, signum)
    except ProcessLookupError:
        pass


# Each rank runs as the child of a small supervisor that reports how the rank
# ended ("STATUS <rank> exit <code>" or "STATUS <rank> signal <n>") and exits
# with a plain code: Hydra tears the whole job down when a rank ends by a
# signal, even with -disable-auto-cleanup, which would hide the survivors.
_rank = os.environ.get("PMI_RANK", "?")
_pid = os.fork()
if _pid:
    # Hydra tells survivors of a failure with SIGUSR1: pass it on to the rank.
    signal.signal(signal.SIGUSR1, _forward)
    _, _status = os.waitpid(_pid, 0)
    if os.WIFSIGNALED(_status):
        say(f"STATUS {_rank} signal {os.WTERMSIG(_status)}")
        os._exit(128 + os.WTERMSIG(_status))
    say(f"STATUS {_rank} exit {os.WEXITSTATUS(_status)}")
    os._exit(os.WEXITSTATUS(_status))

from common import assert_close, hvd, mx, np, start  # noqa: E402

from mxnet.base import MXNetError  # noqa: E402

from mxplugin import PeerFailureError  # noqa: E402

mode = sys.argv[1]
r, n = start()

first = hvd.allreduce(mx.nd.ones((4,)) * (r + 1), name="first", op=hvd.Sum)
assert_close(first, np.full((4,), n * (n + 1) / 2), what="first allreduce")

if r == 1:
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(1)

time.sleep(0.5)  # let the peer die first
t0 = time.time()
try:
    hvd.allreduce(mx.nd.ones((4,)), name="second").asnumpy()
except MXNetError as e:
    msg = str(e)
    assert "lost contact" in msg, f"rank {r}: unexpected error:\n{msg}"
else:
    raise AssertionError(f"rank {r}: allreduce with a dead peer did not fail")
elapsed = time.time() - t0
say(f"rank {r}: allreduce failed after {elapsed:.1f} s")
assert elapsed < 45, f"rank {r}: took {elapsed:.1f} s to notice the dead peer"

# Further ops fail promptly instead of hanging: at the call, or on read.
for kind in ("allreduce", "broadcast", "barrier"):
    t1 = time.time()
    try:
        if kind == "allreduce":
            hvd.allreduce(mx.nd.ones((4,)), name="third").asnumpy()
        elif kind == "broadcast":
            hvd.broadcast(mx.nd.ones((4,)), root_rank=0, name="third").asnumpy()
        else:
            hvd.barrier()
    except (MXNetError, PeerFailureError) as e:
        assert "lost contact" in str(e), f"rank {r}: {kind} after failure: unexpected error:\n{e}"
    else:
        raise AssertionError(f"rank {r}: {kind} after a peer failure did not fail")
    assert time.time() - t1 < 5, f"rank {r}: {kind} after failure took {time.time() - t1:.1f} s"

say(f"PASS {r}")
hvd.shutdown()
