"""mxplugin-run: everything the launcher's process runs (it never imports
MXNet, nor the training code): the command line (run), the job under
mpiexec (job, line_relay, lost_hosts, remote_shells), hosts and where they
come from (hosts, slurm), which MPI launcher and its arguments
(mpi_launcher), and --check-build (build_report). The elastic launcher's
side lives in mxplugin/elastic/ (driver, service, supervisor, discovery)."""
