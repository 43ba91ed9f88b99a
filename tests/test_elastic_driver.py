"""Elastic training without a cluster: the states at 1 and 2 ranks, an
elastic launch on this machine, and the launcher's pieces on their own
(discovery output, host choice, the verdict on a finished world, the
service's token, usage errors)."""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading

import pytest

from mpi_harness import HANG_S, REPO, assert_spmd_ok, rank_env
from mxplugin.elastic import client as elastic_client
from mxplugin_run.elastic import segments
from mxplugin_run.elastic.cooldown import LeftOutHosts, cooldown_for
from mxplugin_run.elastic.discovery import DiscoveryError, parse_discovered, usable
from mxplugin_run.elastic.driver import ElasticDriver, ElasticError
from mxplugin_run.elastic.rank_ends import ProcessEnd
from mxplugin_run.protocol import ENV_DRIVER, ENV_TOKEN, ENV_WORLD, TOKEN_HEADER
from mxplugin_run.elastic.service import NOT_STARTED, DriverService
from mxplugin_run.elastic.start_failures import NO_HELLO, hosts_not_started, leave_out_not_started


@pytest.mark.parametrize("np_", [1, 2])
def test_states_commit_restore_sync_and_carry_over(np_):
    assert_spmd_ok("check_elastic_state.py", np_)


def test_elastic_launch_on_one_machine():
    done = subprocess.run([sys.executable, "-m", "mxplugin_run", "--min-np", "2", "--max-np", "2", sys.executable,
                           "examples/mxnet_elastic_digits.py", "--epochs", "2"], capture_output=True, text=True,
                          env=rank_env(), cwd=REPO, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "elastic: world 0: 2 ranks on localhost:2" in done.stderr, done.stderr[-4000:]
    assert "elastic: world 0 finished" in done.stderr, done.stderr[-4000:]
    assert "epoch 2: test accuracy" in done.stdout + done.stderr


def test_ctrl_c_stops_an_elastic_job_rather_than_restart_it(tmp_path):
    """The launcher's interrupt reaches every rank; ranks ending by it are
    not lost ranks, so no new world starts."""
    # Never created: the job trains until the Ctrl-C, however fast the machine.
    never = str(tmp_path / "never")
    proc = subprocess.Popen([sys.executable, "-m", "mxplugin_run", "--min-np", "2", "--max-np", "2", sys.executable,
                             "examples/mxnet_elastic_digits.py", "--epochs", "2", "--until-exists", never,
                             "--log-steps"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=rank_env(), cwd=REPO,
                            start_new_session=True)
    try:
        for line in proc.stdout:
            if line.startswith("commit 2:"):
                break
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted (Ctrl-C): stopping all 2 ranks" in out, out[-3000:]
    assert "world 1" not in out and "lost rank" not in out, out[-3000:]


def test_discovery_output():
    assert parse_discovered("a:2\n# comment\nb\n\na:3  # more\n", "s") == [("a", 3), ("b", 1)]
    with pytest.raises(DiscoveryError, match=r"s printed 'c:x'"):
        parse_discovered("c:x\n", "s")


def test_usable_hosts_leave_out_excluded_and_cut_at_max_np():
    hosts = [("a", 2), ("b", 2), ("c", 2)]
    assert usable(hosts, {"b": "lost"}, None) == [("a", 2), ("c", 2)]
    assert usable(hosts, {}, 3) == [("a", 2), ("b", 1)]


def driver_with(service, checkpoint=None):
    args = argparse.Namespace(host_discovery_script=None, static_hosts=[("a", 1), ("b", 1), ("c", 1)], max_np=3,
                              num_proc=None, min_np=2, checkpoint_path=checkpoint, blacklist_cooldown_range=None,
                              rsh="ssh", ssh_connect_timeout=1, network_interface=None)
    return ElasticDriver(args, {}, "test", None)


@pytest.fixture
def service():
    s = DriverService()
    yield s
    s.server.server_close()


def finished_world(service, left=(), exits=(), registered=(0, 1, 2)):
    record = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    record.registered.update({rank: 1000 + rank for rank in registered})
    record.left.update(left)
    record.exits.update(exits)
    return record


def test_verdicts(service):
    driver = driver_with(service)
    done = finished_world(service, left={0: "done", 1: "done", 2: "done"}, exits={0: ProcessEnd(code=0)})
    assert driver.judge(service, done, 10) is None  # every rank finished, whatever mpiexec says
    lost = finished_world(service, left={0: "failure", 1: "failure"}, exits={2: ProcessEnd(signal=9)})
    verdict = driver.judge(service, lost, 137)
    assert "lost rank 2 on c (signal 9); left out: c for 30 s" in verdict, verdict
    assert driver.left_out.now() == {"c": "rank 2 was lost there (signal 9)"}
    hosts = finished_world(service, left={0: "hosts", 1: "hosts", 2: "hosts"})
    assert driver.judge(service, hosts, 75) == "world 0: hosts changed"
    bug = finished_world(service, left={0: "failure", 2: "failure"}, exits={1: ProcessEnd(code=1)})
    with pytest.raises(ElasticError, match=r"rank 1 on b \(exit code 1\): an error in the training script"):
        driver.judge(service, bug, 1)
    everyone = finished_world(service, exits={0: ProcessEnd(signal=9), 1: ProcessEnd(signal=9)})  # rank 2: not a word
    with pytest.raises(ElasticError, match="every rank was lost and there is no committed state"):
        driver.judge(service, everyone, 137)
    service.offer_state(4, b"state")
    assert "resuming from the newest committed state" in driver.judge(service, everyone, 137)
    finished_then_lost = finished_world(service, left={0: "done", 1: "done"}, exits={2: ProcessEnd(signal=9)})
    assert driver.judge(service, finished_then_lost, 137) is None
    timed_out = finished_world(service, left={0: "failure", 1: "failure", 2: "failure"})
    assert "lost contact with each other, though none ended" in driver.judge(service, timed_out, 75)
    never_started = finished_world(service, registered=())
    with pytest.raises(ElasticError, match="no rank started"):
        driver.judge(service, never_started, 1)


def test_ranks_stuck_in_mpis_start_are_not_waited_for_nor_taken_for_errors(service):
    """Note [Ranks that never started]: rank 2 killed before any rank
    registered leaves the others inside MPI's start for good; once the
    world is broken they are given up on after the grace, and their ends
    when mpiexec is abandoned (MPICH exits them, code 255), whether before
    or after that, are not errors of the training script. A world that is
    not broken waits for its ranks to start, however long."""
    driver = driver_with(service)
    healthy = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    assert service.give_up_on_unstarted(0.1) == [] and not healthy.left
    world = service.new_world(1, [("a", 1), ("b", 1), ("c", 1)])
    service.handle("POST", "/exit", {"world": "1", "rank": "2", "signal": "9"}, b"")
    service.handle("POST", "/exit", {"world": "1", "rank": "1", "code": "255"}, b"")
    assert service.give_up_on_unstarted(0.1) == [0]
    assert service.only_out_of_reach_run() and service.unaccounted() == []
    service.handle("POST", "/exit", {"world": "1", "rank": "0", "code": "255"}, b"")
    verdict = driver.judge(service, world, 1)
    assert verdict == "world 1: lost rank 2 on c (signal 9); left out: c for 30 s", verdict
    assert driver.left_out.now() == {"c": "rank 2 was lost there (signal 9)"}


def test_a_ranks_mpich_segments_are_found_and_removed_but_not_the_scripts_own():
    """Note [Segments of a rank that ended]: what a rank maps of MPICH's
    names in /dev/shm is found from its maps and removed; a segment of
    another name (a dataset the script shares) is not the job's."""
    names = [f"mpich_shm_test{os.getpid()}_0", f"dataset{os.getpid()}"]
    rank = ("import mmap, os, sys\n"
            "maps = []\n"
            f"for name in {names!r}:\n"
            "    fd = os.open('/dev/shm/' + name, os.O_CREAT | os.O_RDWR, 0o600)\n"
            "    os.ftruncate(fd, 4096)\n"
            "    maps.append(mmap.mmap(fd, 4096))\n"
            "print('mapped', flush=True)\n"
            "sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", rank], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "mapped\n"
        found = segments.mapped(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait(timeout=HANG_S)
    try:
        assert found == {names[0]}
        assert segments.mapped(proc.pid) == set()  # ended: nothing to read
        segments.remove(found)
        assert [os.path.exists(segments.SHM_DIR + name) for name in names] == [False, True]
    finally:
        segments.remove(names)


def test_a_frozen_rank_hears_that_its_world_is_over_on_the_connection_it_kept(service):
    """Note [Frozen ranks] in mxplugin/elastic/runner.py: the probe's one
    connection answers whether the world is over, before and after the
    launcher moved on, with no new connection."""
    service.start()
    try:
        service.new_world(0, [("a", 1), ("b", 1)])
        probe = elastic_client.WorldProbe(elastic_client.DriverClient(f"127.0.0.1:{service.port}", service.token, 0,
                                                                      rank=1))
        assert probe.world_over() is False
        connection = probe.connection
        service.new_world(1, [("a", 1)])
        assert probe.world_over() is True and probe.connection is connection
        probe.close()
    finally:
        service.stop()


def test_a_rank_that_crashed_as_it_left_is_a_leaver_and_keeps_its_host(service):
    """Note [One rule for a world's end]: rank 1 decided to leave (its world
    was broken by rank 2's end) and crashed inside MPI before it said so:
    the phase its agent reports says it was leaving, and only rank 2's host
    is left out. Such an end alone breaks the world, as a leave after a
    failure does."""
    driver = driver_with(service)
    world = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    world.registered.update({0: 1000, 1: 1001, 2: 1002})
    service.handle("POST", "/exit", {"world": "0", "rank": "1", "signal": "11", "phase": "leaving"}, b"")
    assert world.broken == "rank 1 on b left (crashed inside MPI as it left)", world.broken
    service.handle("POST", "/exit", {"world": "0", "rank": "2", "signal": "9"}, b"")
    service.handle("POST", "/leave", {"world": "0", "rank": "0", "reason": "failure"}, b"")
    verdict = driver.judge(service, world, 137)
    assert verdict == "world 0: lost rank 2 on c (signal 9); left out: c for 30 s", verdict
    assert driver.left_out.now() == {"c": "rank 2 was lost there (signal 9)"}
    # Not a crash (a plain EXIT_RESET with no leave said) it is a lost rank.
    other = finished_world(service, left={0: "failure"}, exits={1: ProcessEnd(code=75), 2: ProcessEnd(signal=9)})
    assert "lost rank 1 on b (code 75), rank 2 on c (signal 9)" in driver.judge(service, other, 137)


def test_a_rank_whose_mpi_start_crashed_never_started_and_keeps_its_host(service):
    """Note [One rule for a world's end]: mpiexec gave up on world 0 (host c
    unreachable) and ranks 0 and 1 crashed inside MPI's start: the phase
    their agents report says so; the world is broken, only c is blamed, and
    nothing is an error of the training script."""
    driver = driver_with(service)
    world = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    service.handle("POST", "/exit", {"world": "0", "rank": "0", "code": "255", "phase": "starting"}, b"")
    assert world.broken == "rank 0 on a crashed in MPI's start, as its world was torn down", world.broken
    service.handle("POST", "/exit", {"world": "0", "rank": "1", "signal": "6", "phase": "starting"}, b"")
    assert world.left == {0: NOT_STARTED, 1: NOT_STARTED}
    world.out_of_reach[2] = "its MPI proxy could not connect back to mpiexec"
    verdict = driver.judge(service, world, 1)
    assert verdict.startswith("world 0: lost rank 2 on c (its MPI proxy"), verdict
    assert set(driver.left_out.now()) == {"c"}


def test_an_end_in_a_phase_no_agent_has_is_refused_and_a_running_crash_is_a_crash(service):
    """The service takes only the phases of phases.py, before it records
    anything; a crash in the phase running is a lost rank, its host left out."""
    driver = driver_with(service)
    world = service.new_world(0, [("a", 1), ("b", 1)])
    world.registered.update({0: 1000, 1: 1001})
    status, _, body = service.handle("POST", "/exit", {"world": "0", "rank": "1", "signal": "11", "phase": "lunch"},
                                     b"")
    assert status == 400 and b"phase" in body and world.exits == {} and world.broken is None, body
    service.handle("POST", "/exit", {"world": "0", "rank": "1", "signal": "11", "phase": "running"}, b"")
    assert world.broken == "rank 1 on b ended (signal 11)" and world.left == {}, world.broken
    service.handle("POST", "/leave", {"world": "0", "rank": "0", "reason": "failure"}, b"")
    verdict = driver.judge(service, world, 1)
    assert verdict.startswith("world 0: lost rank 1 on b (signal 11)"), verdict


@pytest.mark.parametrize("how", [ProcessEnd(signal=11), ProcessEnd(signal=6), ProcessEnd(code=255)])
def test_a_crash_once_the_world_is_broken_keeps_its_host_and_is_no_script_error(service, how):
    """Note [One rule for a world's end]: rank 2's host is cut off (no rank ended)
    and the launcher has broken the world; then rank 1's MPI crashes (code
    255: MXNet's own SIGSEGV handler). Only rank 2's host is left out, and
    the job goes on."""
    driver = driver_with(service)
    world = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    world.registered.update({0: 1000, 1: 1001, 2: 1002})
    world.out_of_reach[2] = "not heard from for 15 s"
    service.break_world("rank 2 on c is out of reach")
    service.handle("POST", "/exit", {"world": "0", "rank": "1", **how.query()}, b"")
    service.handle("POST", "/leave", {"world": "0", "rank": "0", "reason": "failure"}, b"")
    verdict = driver.judge(service, world, 137)
    assert verdict.startswith(f"world 0: lost rank 1 on b ({how}), rank 2 on c (not heard from for 15 s) "
                              "(kept for the next world: b,"), verdict
    assert driver.left_out.now() == {"c": "rank 2 was lost there (not heard from for 15 s)"}
    # The same crash before anything broke the world is held against its host.
    first = service.new_world(1, [("a", 1), ("b", 1), ("c", 1)])
    first.registered.update({0: 1000, 1: 1001, 2: 1002})
    service.handle("POST", "/exit", {"world": "1", "rank": "1", **how.query()}, b"")
    assert first.broken == f"rank 1 on b ended ({how})" and first.crashed_when_broken == set()


def test_a_crash_after_a_peer_was_lost_keeps_its_host(service):
    """Note [One rule for a world's end]: rank 2 killed, then rank 1's MPI crashes:
    only rank 2's host is left out. A host whose rank crashes first is."""
    driver = driver_with(service)
    verdict = driver.judge(service, finished_world(service, left={0: "failure"},
                                                   exits={2: ProcessEnd(signal=9), 1: ProcessEnd(signal=11)}), 137)
    assert "kept for the next world: b" in verdict and "left out: c for 30 s" in verdict, verdict
    assert driver.left_out.now() == {"c": "rank 2 was lost there (signal 9)"}
    verdict = driver.judge(service, finished_world(service, left={0: "failure"},
                                                   exits={1: ProcessEnd(signal=11), 2: ProcessEnd(signal=9)}), 137)
    assert set(driver.left_out.now()) == {"b", "c"}, verdict
    assert "left out: b for 30 s, c for 60 s" in verdict, verdict  # c's second fault: twice as long


def test_a_crash_under_a_running_world_keeps_its_host_whichever_end_came_first(service):
    """Note [Crashes under a running world]: rank 1's MPI crashed under its
    core's thread (EXIT_WORLD_CRASHED) as rank 2 was killed; the crash's
    report may come first. Either way only rank 2's host is left out, and
    the crash is no script error. Alone (no peer ended by a signal nor out
    of reach), it is held against its host like any crash."""
    for exits in ({1: ProcessEnd(code=78), 2: ProcessEnd(signal=9)}, {2: ProcessEnd(signal=9), 1: ProcessEnd(code=78)}):
        driver = driver_with(service)
        verdict = driver.judge(service, finished_world(service, left={0: "failure"}, exits=exits), 137)
        assert "rank 1 on b (code 78)" in verdict and "kept for the next world: b" in verdict, verdict
        assert driver.left_out.now() == {"c": "rank 2 was lost there (signal 9)"}
    driver = driver_with(service)
    verdict = driver.judge(service, finished_world(service, left={0: "failure", 2: "failure"},
                                                   exits={1: ProcessEnd(code=78)}), 137)
    assert driver.left_out.now() == {"b": "rank 1 was lost there (code 78)"}, verdict


def test_a_crash_after_its_peers_left_for_new_hosts_keeps_its_host(service):
    """Note [One rule for a world's end]: the launcher's hosts changed, ranks 0 and 1
    left the world at its commit, then MPI crashed under rank 2's core
    thread (EXIT_WORLD_CRASHED): no host is left out. The same crash before
    any peer left is held against its host."""
    driver = driver_with(service)
    world = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    world.registered.update({0: 1000, 1: 1001, 2: 1002})
    world.hosts_updated = True
    for rank in ("0", "1"):
        service.handle("POST", "/leave", {"world": "0", "rank": rank, "reason": "hosts"}, b"")
    service.handle("POST", "/exit", {"world": "0", "rank": "2", "code": "78"}, b"")
    verdict = driver.judge(service, world, 1)
    assert world.crashed_when_broken == {2} and driver.left_out.now() == {}, verdict
    alone = service.new_world(1, [("a", 1), ("b", 1), ("c", 1)])
    alone.registered.update({0: 1000, 1: 1001, 2: 1002})
    alone.hosts_updated = True
    service.handle("POST", "/exit", {"world": "1", "rank": "2", "code": "78"}, b"")
    assert alone.crashed_when_broken == set() and alone.broken is not None


def test_ranks_leaving_for_new_hosts_hear_when_every_rank_of_their_world_has_left(service):
    """Note [Leaving together] in mxplugin/elastic/runner.py: a rank that
    left for new hosts waits on the launcher until the others have left,
    ended or are out of reach, and hears which ranks are still in the world
    when its wait is up."""
    service.start()
    try:
        world = service.new_world(0, [("a", 1), ("b", 1), ("c", 1), ("d", 1)])
        world.registered.update({0: 1000, 1: 1001, 2: 1002, 3: 1003})
        client = elastic_client.DriverClient(f"127.0.0.1:{service.port}", service.token, 0, rank=0)
        client.leave("hosts")
        assert client.wait_all_left(0) == [1, 2, 3]
        answers = []
        waiting = threading.Thread(target=lambda: answers.append(client.wait_all_left(HANG_S)))
        waiting.start()
        service.handle("POST", "/leave", {"world": "0", "rank": "1", "reason": "hosts"}, b"")
        service.handle("POST", "/exit", {"world": "0", "rank": "2", "code": "75"}, b"")
        assert client.wait_all_left(0) == [3] and waiting.is_alive()
        with service.lock:
            world.out_of_reach[3] = "not heard from for 15 s"
            service.changed.notify_all()
        waiting.join(HANG_S)
        assert answers == [[]], answers
        # A world the launcher has moved on from holds nobody back.
        service.new_world(1, [("a", 1), ("b", 1)])
        assert client.wait_all_left(HANG_S) == []
        status, _, body = elastic_client.DriverClient(f"127.0.0.1:{service.port}", service.token, 1,
                                                      rank=0)._request("GET", "/all_left", wait=-1)
        assert status == 400 and body == b"bad request: wait -1.0 is not within 0..600 s", body
    finally:
        service.stop()


class RecordingClient:
    def __init__(self, still_in_world):
        self.calls, self.still_in_world = [], still_in_world

    def state_commit(self):
        return 5

    def leave(self, reason):
        self.calls.append(("leave", reason))

    def wait_all_left(self, seconds):
        self.calls.append(("wait_all_left", seconds))
        return self.still_in_world


class Ended(Exception):
    pass


@pytest.mark.parametrize("reason", ["hosts", "failure"])
def test_a_rank_leaving_for_new_hosts_exits_only_after_it_waited_for_its_peers(monkeypatch, capfd, reason):
    """Note [Leaving together]: leaving for new hosts, a rank says so, then
    waits for its peers (naming those still in the world when the wait is
    up) before it exits; leaving after a failure it does not wait (a peer
    is gone)."""
    from mxplugin.elastic import runner

    client = RecordingClient(still_in_world=[2])

    def end(code, text=None):
        client.calls.append(("end", code))
        raise Ended()

    monkeypatch.setattr(runner, "_end", end)
    monkeypatch.setattr(runner, "_finished", threading.Event())
    monkeypatch.setattr(runner.hvd, "rank", lambda: 1)
    with pytest.raises(Ended):
        runner._leave(object(), client, reason, hand_over=False)
    waited = [("wait_all_left", runner.LEAVE_TOGETHER_S)] if reason == "hosts" else []
    assert client.calls == [("leave", reason)] + waited + [("end", runner.EXIT_RESET)], client.calls
    said = capfd.readouterr().err
    assert ("rank 2 still in this world after 30 s: leaving without waiting longer" in said) == (reason == "hosts"), said


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_a_left_out_host_comes_back_after_its_cool_down_and_waits_longer_each_fault(service, capsys,
                                                                                     monkeypatch):
    """Note [Cool-downs]: 30 s, then 60, 120, ... up to the range's end;
    the host is usable again once its time is over and it answers, and the
    launcher says so; one that does not answer is left out again, longer."""
    from mxplugin_run.elastic import driver as driver_module

    cut_off = set()
    monkeypatch.setattr(driver_module, "unreachable_hosts",
                        lambda hosts, rsh, timeout: [(h, f"{h}: no answer") for h, _ in hosts if h in cut_off])
    assert [cooldown_for(n, (30, 600)) for n in (1, 2, 3, 5, 6)] == [30, 60, 120, 480, 600]
    assert cooldown_for(3, (float("inf"), float("inf"))) == float("inf")
    driver = driver_with(service)
    clock = FakeClock()
    driver.left_out = LeftOutHosts((30, 100), clock)
    listed = [("a", 1), ("b", 1), ("c", 1)]
    driver.judge(service, finished_world(service, left={0: "failure", 1: "failure"}, exits={2: ProcessEnd(signal=9)}), 137)
    assert driver.usable_now(listed) == [("a", 1), ("b", 1)]
    clock.t += 29.9
    assert driver.usable_now(listed) == [("a", 1), ("b", 1)]
    clock.t += 0.1
    assert driver.usable_now(listed) == listed
    assert "c's cool-down is over (left out after its fault 1: rank 2 was lost there (signal 9)): trying it again" \
        in capsys.readouterr().err
    assert driver.usable_now(listed) == listed and "cool-down" not in capsys.readouterr().err  # said once
    for expected in (60, 100, 100):  # it fails again: twice as long, at most the range's end
        verdict = driver.judge(service, finished_world(service, left={0: "failure", 1: "failure"},
                                                       exits={2: ProcessEnd(signal=9)}), 137)
        assert f"left out: c for {expected} s" in verdict, verdict
        clock.t += expected - 1
        assert driver.usable_now(listed) == [("a", 1), ("b", 1)]
        clock.t += 1
        assert driver.usable_now(listed) == listed
    cut_off.add("c")  # its cool-down ends while it is cut off: left out again, as a further fault
    driver.judge(service, finished_world(service, left={0: "failure", 1: "failure"}, exits={2: ProcessEnd(signal=9)}), 137)
    clock.t += 100
    assert driver.usable_now(listed) == [("a", 1), ("b", 1)]
    assert "c's cool-down is over but it does not answer: left out for 100 s" in capsys.readouterr().err
    cut_off.clear()
    clock.t += 100
    assert driver.usable_now(listed) == listed


def test_a_host_that_answers_the_shell_but_cannot_reach_the_launcher_is_left_out_again(service, capsys,
                                                                                     monkeypatch):
    """Note [Hosts that cannot reach the launcher]: c's cool-down ends while
    its link is cut (its remote shell still works): the agent's reach check fails
    there, and c is left out again, longer, without a world being tried on
    it; once it connects, it is tried again."""
    from mxplugin_run.elastic import driver as driver_module

    link_cut = {"c"}

    def remote_shell(hosts, rsh, timeout, command=("true",)):
        if command == ("true",):
            return []
        assert command[:-3] == driver_module.reach_back_command() and command[-2] == "4321", command
        return [(h, f"{h} (cannot connect to the launcher at {command[-3]}:4321: No route to host)")
                for h, _ in hosts if h in link_cut]
    monkeypatch.setattr(driver_module, "unreachable_hosts", remote_shell)
    monkeypatch.setattr(driver_module, "is_local_host", lambda host: False)
    driver = driver_with(service)
    driver.service_port = 4321
    clock = FakeClock()
    driver.left_out = LeftOutHosts((30, 100), clock)
    listed = [("a", 1), ("b", 1), ("c", 1)]
    driver.judge(service, finished_world(service, left={0: "failure", 1: "failure"}, exits={2: ProcessEnd(signal=9)}), 137)
    clock.t += 30
    assert driver.usable_now(listed) == [("a", 1), ("b", 1)]
    said = capsys.readouterr().err
    assert re.search(r"c's cool-down is over but it cannot reach the launcher: c \(cannot connect to the launcher "
                     r"at \S+:4321: No route to host\); left out for 60 s", said), said
    link_cut.clear()
    clock.t += 60
    assert driver.usable_now(listed) == listed
    assert "c's cool-down is over (left out after its fault 2: it could not reach the launcher" \
        in capsys.readouterr().err


def test_reach_back_connects_or_says_why():
    """The agent's reach check (mxplugin_run/rank_agent.py --reach), as the remote shell runs it."""
    import socket

    from mxplugin_run.elastic.driver import reach_back_command

    reach_back = list(reach_back_command())

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        ok = subprocess.run([*reach_back, "127.0.0.1", str(port), "5"], capture_output=True,
                            text=True, timeout=60, cwd="/")
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run([*reach_back, "127.0.0.1", str(port), "5"], capture_output=True,
                             text=True, timeout=60, cwd="/")  # the port is closed now
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"cannot connect to the launcher at 127.0.0.1:{port}: "), refused.stderr


def say_hello(service, world, *ranks):
    for rank in ranks:
        service.handle("POST", "/hello", {"world": str(world), "rank": str(rank)}, b"")


NO_ROUTE = "its MPI proxy could not connect back to mpiexec: No route to host"


def test_the_hosts_a_world_could_not_start_on_are_left_out_as_a_lost_ranks_would_be(service):
    """Note [Hosts a world cannot start on]: no rank registered; the hosts
    mpiexec names, else those where no agent said hello while another
    did, are left out with a lost rank's back-off. A world that nobody
    started and nobody is blamed for, or one that started, blames no host."""
    driver = driver_with(service)
    listed = [("a", 1), ("b", 1), ("c", 1)]
    world = service.new_world(0, listed)
    say_hello(service, 0, 0, 1)
    assert hosts_not_started(service, world, {}) == {"c": NO_HELLO}
    assert hosts_not_started(service, world, {"c": NO_ROUTE}) == {"c": NO_ROUTE}
    line = leave_out_not_started(0, {"c": NO_ROUTE}, driver.left_out)
    assert line == f"world 0 could not start on c ({NO_ROUTE}); left out: c for 30 s; a new world starts without it"
    assert driver.usable_now(listed) == [("a", 1), ("b", 1)]
    assert driver.left_out.now() == {"c": f"world 0 could not start there: {NO_ROUTE}"}
    again = leave_out_not_started(1, {"b": NO_HELLO, "c": NO_ROUTE}, driver.left_out)
    assert again.endswith("left out: b for 30 s, c for 60 s; a new world starts without them"), again
    nobody = service.new_world(2, listed)  # mpiexec failed before any host started: the job stops, as before
    assert hosts_not_started(service, nobody, {}) == {}
    started = finished_world(service, registered=(0,))
    assert hosts_not_started(service, started, {"c": NO_ROUTE}) == {}


def test_a_world_with_hosts_that_never_start_is_broken_once_the_others_are_given_up_on(service):
    """Nothing started on b and c: after the hello grace (not before) the
    world is broken naming them, and the rank that started, stuck in MPI's
    start, is given up on (Note [Ranks that never started]). A world whose
    ranks registered is never broken so."""
    world = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    say_hello(service, 0, 0)
    service.break_if_not_started(60)
    assert world.broken is None and world.not_started == {}
    world.began -= 61
    service.break_if_not_started(60)
    assert world.broken == "nothing started on b, c within 60 s", world.broken
    assert set(world.not_started) == {"b", "c"}
    assert service.give_up_on_unstarted(0.1) == [0, 1, 2] and set(world.left.values()) == {NOT_STARTED}
    running = finished_world(service, registered=(0, 1, 2))
    running.began -= 61
    service.break_if_not_started(60)
    assert running.broken is None


# Each world of the launcher below: c's proxy cannot connect back while
# c is listed (Hydra says so and gives up: exit 255), after a and b said
# hello; a world without c registers its ranks and finishes. With
# "nobody", every world fails before any host starts.
WORLDS = r"""
import os, sys, urllib.request
ENV_DRIVER, ENV_TOKEN, ENV_WORLD, TOKEN_HEADER, size, mode = sys.argv[1:]
world, size = os.environ[ENV_WORLD], int(size)
def ask(path):
    request = urllib.request.Request(f"http://{os.environ[ENV_DRIVER]}{path}", data=b"", method="POST",
                                     headers={TOKEN_HEADER: os.environ[ENV_TOKEN]})
    urllib.request.urlopen(request, timeout=60).read()
if mode == "nobody":
    sys.exit("mpiexec: bad option")
if size == 3:
    for rank in (0, 1):
        ask(f"/hello?world={world}&rank={rank}")
    sys.stderr.write('[proxy:2@vm] HYDU_sock_connect (sock.c:140): unable to connect from "vm" to "10.0.0.1" '
                     '(No route to host)\n[mpiexec@vm] ui_cmd_cb (pmiserv_pmci.c:51): Launch proxy failed.\n')
    sys.exit(255)
for rank in range(size):
    ask(f"/hello?world={world}&rank={rank}")
    ask(f"/register?world={world}&rank={rank}&pid=1")
for rank in range(size):
    ask(f"/leave?world={world}&rank={rank}&reason=done")
"""


def launcher_of(mode):
    """ElasticDriver as mxplugin-run makes it, hosts a, b, c (each answering
    the remote shell), --reset-limit 0, its worlds WORLDS in `mode`."""
    args = argparse.Namespace(host_discovery_script=None, static_hosts=[("a", 1), ("b", 1), ("c", 1)], max_np=3,
                              min_np=2, num_proc=None, checkpoint_path=None, blacklist_cooldown_range=None,
                              rsh="true", ssh_connect_timeout=10, elastic_timeout=5.0, discovery_interval=1.0,
                              network_interface="lo", verbose=False, reset_limit=0)

    def world_command(hosts, size):
        return [sys.executable, "-S", "-c", WORLDS, ENV_DRIVER, ENV_TOKEN, ENV_WORLD, TOKEN_HEADER, str(size), mode]

    return ElasticDriver(args, dict(os.environ), "test", world_command)


def test_a_world_that_cannot_start_on_a_host_is_followed_by_one_without_it_and_is_no_reset(capfd):
    """Issue 48: the launcher named c in one line and went on on a and b
    (within --reset-limit 0: nothing had trained), where it used to stop
    with "no rank started"; a world no host started still stops the job."""
    assert launcher_of("c cut off").run() == 0
    err = capfd.readouterr().err
    assert f"test: elastic: world 0 could not start on c ({NO_ROUTE}); left out: c for 30 s; a new world starts " \
           "without it\n" in err, err
    assert "test: elastic: world 1: 2 ranks on a:1,b:1\n" in err and "world 1 finished" in err, err
    assert launcher_of("nobody").run() == 1
    err = capfd.readouterr().err
    assert "stopping: world 0: no rank started" in err and "could not start on" not in err, err


def test_service_keeps_the_newest_state_and_wants_the_token(service):
    service.start()
    try:
        service.new_world(0, [("localhost", 2)])
        good = elastic_client.DriverClient(f"127.0.0.1:{service.port}", service.token, 0, rank=0)
        bad = elastic_client.DriverClient(f"127.0.0.1:{service.port}", "wrong", 0, rank=0)
        good.hand_over(5, b"five")
        good.hand_over(3, b"three")
        assert good.fetch_state() == (5, b"five")
        assert bad.fetch_state() is None and bad._request("GET", "/updates")[0] == 403
        assert good.wait_broken(0) == ""
        good._request("POST", "/exit", signal="9")  # as rank 0's agent says it
        assert good.wait_broken(5) == "rank 0 on localhost ended (signal 9)"
        stale = elastic_client.DriverClient(f"127.0.0.1:{service.port}", service.token, 7, rank=0)
        assert stale.wait_broken(0) is None
    finally:
        service.server.shutdown()


@pytest.mark.parametrize("options, message", [
    (["--min-np", "3", "--max-np", "2"], "--min-np 3 is more than --max-np 2"),
    (["--min-np", "1", "--host-discovery-script", "true", "-H", "a:1"], "with --host-discovery-script or with -H"),
    (["--min-np", "0"], "--min-np must be at least 1"),
    (["--min-np", "1", "--reset-limit", "-1"], "--reset-limit must be at least 0"),
    (["--min-np", "1", "--blacklist-cooldown-range", "60", "10"], "expected 0 <= MIN <= MAX seconds"),
    (["--min-np", "1", "--blacklist-cooldown-range", "x", "10"], "expected 0 <= MIN <= MAX seconds"),
    (["-np", "2", "--blacklist-cooldown-range", "1", "10"], "--blacklist-cooldown-range is for elastic jobs"),
])
def test_usage_errors(options, message, capsys):
    from mxplugin_run.run import main

    assert main([*options, "true"]) == 2
    assert message in capsys.readouterr().err


def raw_request(port, data):
    """Sends `data` as it is to the service and reads the answer until the
    server closes (our end's writing is shut, so it never waits for more);
    the status code, or None when the server dropped the connection."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=HANG_S) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # refused and closed while we were still sending
            pass
        reply = b""
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    first = reply.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) >= 2 and first[1].isdigit() else None


def fuzzed_request(rng, token, kept):
    """One hostile or broken request (bytes) and what it tries."""
    from mxplugin_run.protocol import TOKEN_HEADER

    kind = rng.choice(["wrong token", "no token", "bad length", "oversized", "garbage", "bad query",
                       "stranger rank", "replayed", "stale world", "bad wait", "old state", "binary path"])
    method, path, headers, body = "GET", "/updates?world=0&rank=0", {TOKEN_HEADER: token}, b""
    if kind == "wrong token":
        headers[TOKEN_HEADER] = rng.choice(["", token[:-1], token + "0", "é" * 8, "x" * 5000])
        method, path = rng.choice([("POST", "/exit?world=0&rank=1&signal=9"), ("PUT", "/state?commit=99")])
        body = b"evil" * rng.randrange(1, 100)
    elif kind == "no token":
        del headers[TOKEN_HEADER]
        method, path = "POST", "/leave?world=0&rank=2&reason=failure"
    elif kind == "bad length":
        headers["Content-Length"] = rng.choice(["-5", "abc", "1e9", "99999999999999999999", "0x10"])
        method, path = "POST", "/register?world=0&rank=0&pid=1"
    elif kind == "oversized":
        method, path = rng.choice([("POST", "/register?world=0&rank=0&pid=1"), ("GET", "/updates?world=0&rank=0")])
        body = rng.randbytes(rng.choice([70_000, 1 << 20, 4 << 20]))
    elif kind == "garbage":
        return rng.choice([rng.randbytes(rng.randrange(1, 3000)), b"\r\n\r\n", b"GET\r\n\r\n",
                           b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 150 + b"\r\n",
                           b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"]), kind
    elif kind == "bad query":
        method, path = rng.choice([("POST", "/register?world=zero&rank=0"), ("POST", "/register?world=0&rank=x"),
                                   ("PUT", "/state"), ("PUT", "/state?commit=nan"), ("DELETE", "/state"),
                                   ("GET", "/nothing?world=0&rank=0"), ("POST", "/exit?world=0&rank=0&rank=1%00"),
                                   ("POST", "/exit?world=0&rank=0&how=signal%209"),
                                   ("POST", "/exit?world=0&rank=0&signal=nine"),
                                   ("POST", "/exit?world=0&rank=0&code=1&signal=9")])
    elif kind == "stranger rank":  # a rank the world does not have would count as lost
        method = "POST"
        path = rng.choice(["/exit?world=0&rank=7&signal=9", "/leave?world=0&rank=3&reason=failure",
                           "/exit?world=0&rank=-2&code=1", "/register?world=0&rank=99999999999999&pid=1"])
    elif kind == "replayed":  # what the ranks already said, said again
        method, path = rng.choice([("POST", "/register?world=0&rank=1&pid=1001"), ("GET", "/updates?world=0&rank=2"),
                                   ("PUT", f"/state?commit={kept}"), ("GET", "/state/commit")])
        body = b"replayed state" if path.startswith("/state?") else b""
    elif kind == "stale world":
        method, path = "POST", rng.choice(["/exit?world=-1&rank=1&signal=9", "/leave?world=5&rank=0"])
    elif kind == "bad wait":
        poll = rng.choice(["/broken", "/all_left"])
        path = f"{poll}?world=0&rank=0&wait={rng.choice(['nan', 'inf', '-1', '1e300', 'soon'])}"
    elif kind == "old state":
        method, path, body = "PUT", f"/state?commit={kept - rng.randrange(1, 5)}", b"older state"
    elif kind == "binary path":
        path = "/" + "".join(chr(rng.randrange(1, 0x250)) for _ in range(20))
    if "Content-Length" not in headers:
        headers["Content-Length"] = str(len(body))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    return head.encode("utf-8", "replace") + body, kind


def test_the_service_refuses_malformed_oversized_replayed_and_wrong_token_requests(service, capfd):
    """Note [What the service reads]: a seeded stream of hostile requests
    leaves the current world unbroken, its ranks' records and the held
    state as they were, no traceback in the launcher's output, and the
    service answering the job's own requests."""
    import random

    from mxplugin_run.protocol import TOKEN_HEADER

    seed = int(os.environ.get("MXPLUGIN_FUZZ_SEED", random.SystemRandom().randrange(1 << 30)))
    count = int(os.environ.get("MXPLUGIN_FUZZ_REQUESTS", "600"))
    print(f"service fuzz: seed {seed} (MXPLUGIN_FUZZ_SEED), {count} requests")
    rng = random.Random(seed)
    service.start()
    world = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    world.registered.update({0: 1000, 1: 1001, 2: 1002})
    service.offer_state(7, b"the committed state")
    before = (dict(world.registered), dict(world.left), dict(world.exits), world.hosts_updated)
    tried = {}
    for _ in range(count):
        data, kind = fuzzed_request(rng, service.token, 7)
        status = raw_request(service.port, data)
        tried[kind] = tried.get(kind, 0) + 1
        assert status is None or status >= 400 or kind in ("replayed", "old state"), (kind, data[:200], status)
    print("service fuzz: " + ", ".join(f"{n} {kind}" for kind, n in sorted(tried.items())))
    assert world.broken is None and service.world is world
    assert (dict(world.registered), dict(world.left), dict(world.exits), world.hosts_updated) == before
    assert service.state == (7, b"the committed state")
    ok = f"GET /state/commit HTTP/1.1\r\n{TOKEN_HEADER}: {service.token}\r\nContent-Length: 0\r\n\r\n"
    assert raw_request(service.port, ok.encode()) == 200
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "Exception" not in out + err, err[-3000:]
    with capfd.disabled():  # the figures, for the report (bench/soak.py)
        print("\n" + "\n".join(line for line in out.splitlines() if line.startswith("service fuzz:")))
