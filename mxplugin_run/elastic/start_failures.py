"""Elastic worlds that cannot start on some of their hosts: which hosts to
blame, and leaving them out (Note [Hosts a world cannot start on]).

Note [Hosts a world cannot start on]: a host may be listed by discovery and
answer the remote shell, yet a world cannot start there: its link is cut
while the remote shell still works (a console, a namespace's shell on the
fake hosts of tests/fake_cluster.py), so MPICH's proxy there cannot connect
back to mpiexec, or ssh does not get through, or nothing ever starts there.
MPICH's launcher then gives up on the whole world ("Launch proxy failed":
mpiexec ends), or waits for ever for the host's ranks while the others wait
inside MPI's start. Taking such a world for a broken job would end a job
whose other hosts are healthy. So when no rank of a world registered, the
hosts to blame are
- those mpiexec's own lines say it could not reach
  (mxplugin_run/hosts_not_reached.py);
- else those where no rank's agent said hello (it does as it starts
  its rank, before MXNet loads) while another host's did;
- and, while mpiexec still runs, the hosts with no hello START_HELLO_S
  after the world began: the world is then broken and mpiexec abandoned
  (DriverService.break_if_not_started; the ranks that did start, waiting
  inside MPI's start, then leave by themselves: Note [Leaving MPI's start]
  in start_guard.py, Note [Ranks that never started] in world_record.py).
Each is named in one line and left out with the back-off of a lost rank
(Note [Cool-downs] in cooldown.py), and a new world starts on the other
hosts from the same committed state. Nothing trained in such a world, so
it is no reset: it counts neither towards --reset-limit nor towards the
worlds without progress; every one leaves a host out for longer than the
last, so they cannot follow each other quickly. The job ends only when
fewer than --min-np slots stay usable for --elastic-timeout
(ElasticDriver.wait_for_hosts). A world that no host started and nobody is
blamed for (mpiexec itself failed: a bad option, a missing program) still
stops the job: every world would fail the same way."""
from mxplugin_run.elastic.cooldown import describe_cooldown
from mxplugin_run.timeouts import START_HELLO_S

# START_HELLO_S (timeouts.py): a proxy and a Python process start in well
# under a second; a loaded machine or a slow ssh may take some seconds.
NO_HELLO = "no process of its ranks started there"


def hosts_not_started(service, record, named_by_mpiexec):
    """{host: why} of the hosts `record`'s world (a WorldRecord of
    `service`) could not start on, when none of its ranks registered;
    `named_by_mpiexec` is what mpiexec's lines said (Job.hosts_not_reached).
    {} when the world started, or nothing points at a host."""
    with service.lock:
        if record.registered:
            return {}
        blamed = {**record.not_started, **named_by_mpiexec}  # mpiexec says why in its own words
        if blamed or not record.hello:
            return blamed
        return dict.fromkeys(record.hosts_without_hello(), NO_HELLO)


def leave_out_not_started(number, blamed, left_out):
    """Leaves each host of `blamed` ({host: why}) out for its cool-down
    (`left_out`, a LeftOutHosts); the one line that says so of world
    `number`."""
    cooling = {host: left_out.leave_out(host, f"world {number} could not start there: {why}")
               for host, why in blamed.items()}
    named = ", ".join(f"{host} ({why})" for host, why in blamed.items())
    kept_out = ", ".join(f"{host} {describe_cooldown(seconds)}" for host, seconds in cooling.items())
    them = "it" if len(blamed) == 1 else "them"
    return f"world {number} could not start on {named}; left out: {kept_out}; a new world starts without {them}"
