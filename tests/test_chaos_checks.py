"""How the chaos checks explain a rank's end (Note [Rank ends] in
tests/chaos_checks.py): the crash exit codes count as explained only with
the fault that explains them, never by their code alone."""
import signal
from types import SimpleNamespace

from chaos_checks import (CLEAN, CRASHED_UNDER_WORLD, ELASTIC, INJECTED, UNEXPLAINED, COLLATERAL, explain_end,
                          killed_peer, left_peer)


def rank(pid, world, ended, how):
    return SimpleNamespace(pid=pid, world=world, ended=ended, how=how, host=0, rank=0)


def test_plain_ends_and_sent_signals_are_explained():
    assert explain_end("code 0", (), None)[0] == CLEAN
    assert explain_end("code 75", (), None)[0] == ELASTIC
    assert explain_end("signal 9", (signal.SIGKILL,), "kill_rank")[0] == INJECTED
    assert explain_end("signal 9", (), None)[0] == UNEXPLAINED
    assert explain_end(None, (), None)[0] == UNEXPLAINED


def test_a_crash_under_a_running_world_needs_a_peer_killed_just_before():
    killed = rank(1, world=3, ended=10.0, how="signal 9")
    survivor = rank(2, world=3, ended=10.06, how="code 78")
    late = rank(3, world=3, ended=13.0, how="code 78")
    other_world = rank(4, world=4, ended=10.06, how="code 78")
    ranks, injected = [killed, survivor, late, other_world], {1: [signal.SIGKILL]}
    assert killed_peer(survivor, ranks, injected) is killed
    assert killed_peer(late, ranks, injected) is None
    assert killed_peer(other_world, ranks, injected) is None
    assert explain_end("code 78", (), None, killed)[0] == CRASHED_UNDER_WORLD
    assert explain_end("code 78", (), None, None)[0] == UNEXPLAINED
    assert explain_end("signal 11", (), None, killed)[0] == COLLATERAL


def test_a_frozen_rank_let_go_into_its_ended_world_is_explained_only_after_its_sigcont():
    cause, why = explain_end("code 78", (signal.SIGSTOP, signal.SIGCONT), "freeze_rank")
    assert cause == CRASHED_UNDER_WORLD and "stopped inside an MPI call" in why
    assert explain_end("code 78", (signal.SIGSTOP,), "freeze_rank")[0] == UNEXPLAINED
    assert explain_end("signal 11", (signal.SIGSTOP, signal.SIGCONT), "freeze_rank")[0] == UNEXPLAINED


def test_a_crash_as_its_peers_left_their_world_is_explained_within_the_collateral_window():
    left = rank(1, world=15, ended=269.10, how="code 75")
    crashed = rank(2, world=15, ended=269.19, how="code 78")
    long_after = rank(3, world=15, ended=275.0, how="code 78")
    ranks = [left, crashed, long_after]
    assert left_peer(crashed, ranks) is left and left_peer(long_after, ranks) is None
    assert explain_end("code 78", (), None, None, left)[0] == CRASHED_UNDER_WORLD
    assert explain_end("signal 11", (), None, None, left)[0] == UNEXPLAINED  # a plain crash is not explained so
