"""The one rule for a world's end (mxplugin_run/elastic/rank_ends.py): typed
rank ends in, an outcome out, for every kind of end the launcher meets.
Outcomes, not sentences: what comes next, why, and which hosts are blamed
or kept."""
import pytest

from mxplugin_run.elastic.rank_ends import Cause, Next, Phase, RankEnd, WorldSeen, classify, collateral

HOSTS = ("a", "b", "c")


def end(rank, phase=Phase.RUNNING, **kw):
    return RankEnd(rank, HOSTS[rank], phase, **kw)


def left(rank, why="failure"):
    phases = {"failure": Phase.LEAVING, "hosts": Phase.LEAVING, "done": Phase.DONE, "not started": Phase.STARTING}
    return end(rank, phases[why], left=why)


def seen(code=137, resumable=True, gone=None, started=True):
    return WorldSeen(size=3, gone=gone or {}, mpiexec_code=code, resumable=resumable, started=started)


def outcome_of(ends, **kw):
    out = classify(ends, seen(**kw))
    return out.next, out.cause, out.blamed, out.kept


CASES = {
    "every rank finished": ([left(0, "done"), left(1, "done"), left(2, "done")], {"code": 9},
                            (Next.DONE, None, (), ())),
    "a rank killed, the others left": ([left(0), left(1), end(2, signal=9, order=0)], {},
                                       (Next.NEW_WORLD, Cause.LOST, ("c",), ())),
    "hosts changed": ([left(0, "hosts"), left(1, "hosts"), left(2, "hosts")], {"code": 75},
                      (Next.NEW_WORLD, Cause.HOSTS_CHANGED, (), ())),
    "a script error": ([left(0), end(1, code=1, order=0), left(2)], {"code": 1},
                       (Next.STOP, Cause.SCRIPT_ERROR, (), ())),
    "a script error before MPI's start": ([end(0, Phase.STARTING, code=1, order=0), left(1, "not started"),
                                           left(2, "not started")], {"code": 1},
                                          (Next.STOP, Cause.SCRIPT_ERROR, (), ())),
    "every rank lost, a state to resume": ([end(0, signal=9, order=0), end(1, signal=9, order=1), end(2)], {},
                                           (Next.NEW_WORLD, Cause.EVERY_RANK_LOST, (), ())),
    "every rank lost, nothing to resume": ([end(0, signal=9, order=0), end(1, signal=9, order=1), end(2)],
                                           {"resumable": False}, (Next.STOP, Cause.NOTHING_TO_RESUME, (), ())),
    "lost after training finished": ([left(0, "done"), left(1, "done"), end(2, signal=9, order=0)], {},
                                     (Next.DONE, None, (), ())),
    "cut off, none ended": ([left(0), left(1), left(2)], {"code": 75}, (Next.NEW_WORLD, Cause.CUT_OFF, (), ())),
    "no rank started": ([end(0, Phase.STARTING), end(1, Phase.STARTING), end(2, Phase.STARTING)],
                        {"started": False}, (Next.STOP, Cause.NOTHING_STARTED, (), ())),
    "mpiexec failed, no rank says why": ([end(0, code=0, order=0), end(1, code=0, order=1),
                                          end(2, code=0, order=2)], {"code": 1},
                                         (Next.STOP, Cause.UNEXPLAINED, (), ())),
    "a clean end": ([end(0, code=0, order=0), end(1, code=0, order=1), end(2, code=0, order=2)], {"code": 0},
                    (Next.DONE, None, (), ())),
    "a crash after the kill is collateral": ([left(0), end(1, signal=11, order=1), end(2, signal=9, order=0)], {},
                                             (Next.NEW_WORLD, Cause.LOST, ("c",), ("b",))),
    "a crash before the kill is a root cause": ([left(0), end(1, signal=11, order=0), end(2, signal=9, order=1)],
                                                {}, (Next.NEW_WORLD, Cause.LOST, ("b", "c"), ())),
    "MXNet's crash exit after the world broke": ([left(0), end(1, code=255, order=0, after_break=True),
                                                  end(2, unreachable="not heard from for 15 s")], {},
                                                 (Next.NEW_WORLD, Cause.LOST, ("c",), ("b",))),
    "MXNet's crash exit alone is a script error": ([left(0), end(1, code=255, order=0), left(2)], {"code": 1},
                                                   (Next.STOP, Cause.SCRIPT_ERROR, (), ())),
    "an MPI crash heard of before the kill": ([left(0), end(1, code=78, mpi_crash=True, order=0),
                                               end(2, signal=9, order=1)], {},
                                              (Next.NEW_WORLD, Cause.LOST, ("c",), ("b",))),
    "an MPI crash beside a rank out of reach": ([left(0), end(1, code=78, mpi_crash=True, order=0),
                                                 end(2, unreachable="cut off")], {},
                                                (Next.NEW_WORLD, Cause.LOST, ("c",), ("b",))),
    "an MPI crash alone blames its host": ([left(0), end(1, code=78, mpi_crash=True, order=0), left(2)], {},
                                           (Next.NEW_WORLD, Cause.LOST, ("b",), ())),
    "the reset code with no leave heard": ([left(0), end(1, Phase.LEAVING, code=75, order=0),
                                            end(2, signal=9, order=1)], {},
                                           (Next.NEW_WORLD, Cause.LOST, ("b", "c"), ())),
    "a host discovery dropped is not cooled down": ([left(0), left(1), end(2)], {"gone": {"c": "not listed"}},
                                                    (Next.NEW_WORLD, Cause.LOST, (), ())),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_worlds_end_has_one_outcome(name):
    ends, kw, expected = CASES[name]
    assert outcome_of(ends, **kw) == expected


def test_a_lost_rank_says_why_and_the_dropped_host_is_named():
    out = classify([left(0), end(1, unreachable="not heard from for 15 s"), end(2)],
                   seen(gone={"c": "discovery no longer lists it"}))
    assert [(x.rank, x.why) for x in out.lost] == [(1, "not heard from for 15 s"),
                                                   (2, "c is gone: discovery no longer lists it")]
    assert out.blamed == ("b",) and out.dropped == ("c",)


def test_only_crashes_are_ever_collateral():
    """A SIGKILL after another rank's end is a fault of its own (a second
    host lost), and a script error after a kill is no crash."""
    ends = [end(0, signal=9, order=0), end(1, signal=9, order=1), end(2, code=1, order=2)]
    assert collateral(ends) == set()
    assert classify(ends, seen()).cause is Cause.SCRIPT_ERROR


def test_a_process_end_travels_as_one_field():
    """ProcessEnd: the agent's word on its rank's end, as data; the
    service refuses (None) an end named twice, not at all, or not as a number."""
    from mxplugin_run.elastic.rank_ends import ProcessEnd

    for end in (ProcessEnd(code=0), ProcessEnd(code=78), ProcessEnd(signal=9)):
        assert ProcessEnd.from_query({"world": "0", "rank": "1", **end.query()}) == end
    assert ProcessEnd.of_returncode(-11) == ProcessEnd(signal=11) and str(ProcessEnd(signal=11)) == "signal 11"
    assert [e.crashed for e in (ProcessEnd(signal=11), ProcessEnd(code=255), ProcessEnd(code=78), ProcessEnd(signal=9),
                                ProcessEnd(code=1))] == [True, True, True, False, False]
    for query in ({}, {"how": "signal 9"}, {"code": "1", "signal": "9"}, {"signal": "nine"}, {"code": "-1"},
                  {"signal": "\u00b2"}):
        assert ProcessEnd.from_query(query) is None, query
    with pytest.raises(ValueError):
        ProcessEnd()
