"""Whether this host reaches the elastic launcher: run through the remote
shell on a host whose cool-down is over, before a world is started there
(Note [Hosts that cannot reach the launcher] in driver.py):

    python -m mxplugin_run.elastic.reach_back ADDRESS PORT SECONDS

Exit 0 when a TCP connection to ADDRESS:PORT (the launcher's service) opens
within SECONDS; else 1, with why on stderr. Standard library only."""
import socket
import sys


def main(argv):
    """Exit code of the check of ADDRESS PORT SECONDS in `argv`."""
    address, port, seconds = argv[1], int(argv[2]), float(argv[3])
    try:
        socket.create_connection((address, port), timeout=seconds).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        sys.stderr.write(f"cannot connect to the launcher at {address}:{port}: {why}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
