"""How the chaos checks explain a rank's end (Note [Rank ends] in
tests/chaos_checks.py): the crash exit codes count as explained only with
the fault that explains them, never by their code alone."""
import signal
from types import SimpleNamespace

from chaos_checks import (CLEAN, CRASHED_UNDER_WORLD, ELASTIC, INJECTED, UNEXPLAINED, COLLATERAL, explain_end,
                          killed_peer, left_peer, resumes)


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


def test_a_crash_in_the_phases_starting_and_leaving_is_explained_by_the_phase():
    """Note [Rank ends]: the agent's record of the phase tells a crash in
    MPI's start or while leaving; the same crash while running is not
    explained so."""
    from chaos_checks import CRASHED_LEAVING, CRASHED_STARTING, phases_of

    lines = [(1.0, "mxplugin-run: rank 2 (pid 41 on h3) ended: signal 11, phase leaving"),
             (1.1, "mxplugin-run: rank 0 (pid 42 on h1) ended: code 255, phase starting (its last line: x, y)"),
             (1.2, "mxplugin-run: rank 1 (pid 43 on h2) ended: signal 6, phase running")]
    phases = phases_of(lines)
    assert phases == {41: "leaving", 42: "starting", 43: "running"}
    assert explain_end("signal 11", (), None, phase=phases[41])[0] == CRASHED_LEAVING
    assert explain_end("code 78", (), None, phase="leaving")[0] == CRASHED_LEAVING
    assert explain_end("code 255", (), None, phase=phases[42])[0] == CRASHED_STARTING
    assert explain_end("signal 6", (), None, phase=phases[43])[0] == UNEXPLAINED
    assert explain_end("code 1", (), None, phase="leaving")[0] == UNEXPLAINED


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


# Seed 7203 of a chaos loop: world 6 ended inside commit 25's host check (a
# host dropped), world 7 resumed from it, and its rank 1 was killed inside
# commit 26's: neither commit was printed as made, and world 8 resumed from
# 26, which rank 0 had made. The check took it for a made-up commit.
RESUMED_FROM_UNPRINTED_COMMITS = """\
mxplugin-run: elastic: world 6: 4 ranks on h1:1,h2:1,h3:1,h4:1
step 60: epoch 4, 4 ranks
committing 24: states digest 8.357674
commit 24: step 60
step 61: epoch 4, 4 ranks
step 62: epoch 4, 4 ranks
step 63: epoch 4, 4 ranks
committing 25: states digest 6.236862
mxplugin-run: elastic: world 7: 3 ranks on h1:1,h2:1,h3:1
mxplugin: elastic: rank 0: world 7 of 3 ranks resumes from commit 25 (the state handed over by the last world)
rank 0 of 3 resumes at step 63, weights digest 76.190748, states digest 6.236862, 38440 bytes of optimizer state held
rank 1 of 3 resumes at step 63, weights digest 76.190748, states digest 6.236862, 38440 bytes of optimizer state held
rank 2 of 3 resumes at step 63, weights digest 76.190748, states digest 6.236862, 38440 bytes of optimizer state held
committing 26: states digest 6.236862
mxplugin-run: elastic: world 8: 3 ranks on h1:1,h3:1,h4:1
mxplugin: elastic: rank 0: world 8 of 3 ranks resumes from commit 26 (the state handed over by the last world)
rank 0 of 3 resumes at step 63, weights digest 76.190748, states digest 6.236862, 38440 bytes of optimizer state held
rank 1 of 3 resumes at step 63, weights digest 76.190748, states digest 6.236862, 38440 bytes of optimizer state held
rank 2 of 3 resumes at step 63, weights digest 76.190748, states digest 6.236862, 38440 bytes of optimizer state held
step 64: epoch 5, 3 ranks
"""


def as_lines(text):
    return [(float(i), line) for i, line in enumerate(text.splitlines())]


def test_a_world_may_resume_from_a_commit_made_after_an_unprinted_one_it_resumed_from():
    """Note [Resumes in a chaos run]: a commit a world resumed from counts
    as made, so the next world may resume from the one after it; never from
    one further on, nor from an older one."""
    problems, found = resumes(as_lines(RESUMED_FROM_UNPRINTED_COMMITS))
    assert problems == [], problems
    assert [(f["world"], f["commit"], f["step"]) for f in found] == [(7, 25, 63), (8, 26, 63)], found
    too_new = RESUMED_FROM_UNPRINTED_COMMITS.replace("resumes from commit 26", "resumes from commit 27")
    problems, _ = resumes(as_lines(too_new))
    assert problems == ["world 8 resumed from commit 27 at step(s) 63: the newest commit before it was 25 "
                        "(begun: 26), at step 63"], problems
    too_old = RESUMED_FROM_UNPRINTED_COMMITS.replace("resumes from commit 26", "resumes from commit 24")
    assert resumes(as_lines(too_old))[0] != []
