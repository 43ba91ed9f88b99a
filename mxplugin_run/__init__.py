"""mxplugin-run, the launcher: a package apart from mxplugin, which it never
imports (nor MXNet), so that starting a job costs no MXNet import and the
process that stands beside each rank (its agent, rank_agent) starts in
moments.

- the command line (run, __main__; horovodrun's options,
  horovodrun_options), its hosts and where they come from
  (hosts, placement, slurm), which MPI launcher and its arguments
  (mpi_launcher, mpi_family), --check-build (build_report);
- the job under mpiexec and how its ranks end (job, rank_agent,
  whole_lines, phases, process_end, rank_deaths, lost_hosts, hosts_not_reached, remote_shells, signal_wait);
- elastic jobs, the launcher's side (elastic/: driver, service, discovery,
  what an agent tells the service, the record and rule of a world's end);
- what the ranks and the launcher share: protocol (names, codes) and
  timeouts (every timeout, with the order they must keep).

mxplugin's ranks import only those two shared modules, mpi_family and phases
(what a rank tells its agent)."""
