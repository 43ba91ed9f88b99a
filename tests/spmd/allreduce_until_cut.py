"""Allreduces a large tensor round after round until a collective fails (a
test cuts a host's link meanwhile: tests/test_elastic_partition.py). Rank 0
prints "round N" after each; every rank prints "rank R failed: <error>"
when one fails (the core may instead end the process, saying why, when the
transfer itself is stuck: Note [Stuck transfers]).

Usage: allreduce_until_cut.py ELEMENTS"""
import sys

import mxnet as mx

import mxplugin as hvd


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main():
    hvd.init()
    x = mx.nd.ones((int(sys.argv[1]),))
    rounds = 0
    try:
        while True:
            hvd.allreduce(x, name="x", op=hvd.Sum).wait_to_read()
            rounds += 1
            if hvd.rank() == 0:
                say(f"round {rounds}")
    except mx.base.MXNetError as exc:
        say(f"rank {hvd.rank()} failed: {str(exc).splitlines()[0]}")
        sys.exit(1)


if __name__ == "__main__":
    main()
