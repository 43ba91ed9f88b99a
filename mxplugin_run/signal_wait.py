"""Waits of the launcher's main thread that a stop signal always cuts short.

Note [Signals on other threads]: Python runs a signal's handler on the main
thread only, at its next bytecode, but the kernel delivers a signal sent to
the process to any of its threads that does not block it: the main thread
when it can take it, another one (an output pump, the elastic service's
server) when it has one pending already. The C handler then only marks the
signal as received; a main thread blocked in waitpid() or sleep() is not
woken and runs the handler only when that call returns, so a Ctrl-C would be
seen only when the job ends by itself. Python writes each signal it catches
to the wakeup descriptor (signal.set_wakeup_fd) from whatever thread took
it, so the main thread waits in select() on that descriptor beside what it
waits for (the child's pidfd, or nothing but a time limit): any caught
signal returns from the select and its handler runs at once."""
import contextlib
import os
import select
import signal
import time


@contextlib.contextmanager
def _wakeups():
    """The read end of a pipe the signals' C handler writes to while it is
    open (main thread only, as set_wakeup_fd is)."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    try:
        yield read_end
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)


def _drain(fd):
    try:
        while os.read(fd, 256):
            pass
    except BlockingIOError:
        pass


def wait_for_exit(child):
    """child.wait(), with each caught signal's handler run as it comes
    (Note [Signals on other threads]). The handlers may signal the child;
    they must not raise."""
    try:
        ended = os.pidfd_open(child.pid)
    except ProcessLookupError:  # already ended, not yet reaped
        return child.wait()
    except (AttributeError, OSError):  # no pidfd in this kernel: poll now and then
        ended = None
    try:
        with _wakeups() as woken:
            watched = [woken] + ([ended] if ended is not None else [])
            while child.poll() is None:
                ready, _, _ = select.select(watched, [], [], None if ended is not None else 0.2)
                if woken in ready:
                    _drain(woken)
    finally:
        if ended is not None:
            os.close(ended)
    return child.returncode


def sleep(seconds):
    """time.sleep(seconds), ended early by a caught signal whose handler
    raised (a KeyboardInterrupt): otherwise the sleep goes on to its end."""
    with _wakeups() as woken:
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select([woken], [], [], left)
            if ready:
                _drain(woken)
