"""Where a job's ranks go on a host list [(host, slots)]: hosts fill in
order, each up to its slots, which is how mpiexec places them (MPICH's by
default, Open MPI's with the slots we give it). Every part of the launcher
that asks which rank runs where, or how many ranks a list holds, reads it
here."""


def place_ranks(hosts, num_proc=None):
    """[(host, ranks)] of the hosts that get ranks, in order: each host takes
    up to its slots until `num_proc` ranks are placed (None: every slot).
    Hosts left with no rank are dropped."""
    placed, left = [], num_proc
    for host, slots in hosts:
        take = slots if left is None else min(slots, left)
        if take > 0:
            placed.append((host, take))
            if left is not None:
                left -= take
    return placed


def slot_count(hosts):
    """How many ranks the list holds: a world over all of it has this size."""
    return sum(slots for _, slots in hosts)


def host_of_rank(hosts, rank):
    """The host `rank` runs on when the ranks fill `hosts`; "?" past the last slot."""
    start = 0
    for host, slots in hosts:
        if rank < start + slots:
            return host
        start += slots
    return "?"
