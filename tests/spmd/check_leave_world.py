"""Note [Leaving a broken world] (src/backend/leaving.h): rank 0 leaves its
world while its core polls a negotiation round that rank 1 never joins; its
thread parks long before the peer timeout, the pending op and a later one
fail saying the rank left, and no rank waits on the other. Both end with
os._exit (an elastic rank's way out: no MPI clean-up).

Usage: check_leave_world.py DIR (a folder both ranks see: rank 0's file
there tells rank 1 it is done)."""
import os
import sys
import time

from common import hvd, mx, say, start

from mxplugin import basics  # noqa: E402

done = os.path.join(sys.argv[1], "rank0-done")
r, n = start()
hvd.allreduce(mx.nd.ones((4,)), name="first").wait_to_read()

if r == 0:
    pending = hvd.allreduce(mx.nd.ones((4,)), name="never-joined")
    time.sleep(0.5)  # not a wait for a result: lets the round begin polling (leaving before it also passes)
    parked = basics._core().leave_world(60.0)  # a bound: the peer timeout (120 s) would end the round later
    say(f"PARKED {parked}")
    for what, op in (("pending", lambda: pending),
                     ("later", lambda: hvd.allreduce(mx.nd.ones((4,)), name="later"))):
        try:
            op().wait_to_read()
            say(f"FAIL the {what} op finished")
        except Exception as exc:  # noqa: BLE001 - an MXNetError when read, the core's error type when called
            say(f"ERROR {what}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    open(done, "w").close()
    os._exit(0)
# Rank 1 never joins; it ends once rank 0 is done.
while not os.path.exists(done):
    time.sleep(0.05)
say("RANK1 DONE")
os._exit(0)
