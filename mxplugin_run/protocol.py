"""What the launcher and the ranks agree on: the marker of the lines a rank
writes for the launcher, and the variable its agent sets; for elastic jobs
the environment variables, HTTP headers and exit codes. Imports nothing:
mxplugin's ranks load it too. (A rank's phases and end record: phases.py,
process_end.py.)"""

# Set in a rank's environment by its agent (Note [A rank's agent] in
# rank_agent.py), which reads the lines below off its output.
RELAYED = "MXPLUGIN_RELAYED"
# The line a rank beside its agent writes when it has lost peers, as
# fields (Note [Lost peers as data] in src/core/lost_peer_report.h):
# "<marker> <rank> <host> unreachable=<rank>@<host>,... ended=<rank>@<host>,..."
LOST_PEERS_MARKER = "mxplugin-peers-lost"

ENV_DRIVER = "MXPLUGIN_ELASTIC_DRIVER"          # host:port of the launcher's service
ENV_TOKEN = "MXPLUGIN_ELASTIC_TOKEN"            # the job's secret, sent with every request
ENV_WORLD = "MXPLUGIN_ELASTIC_WORLD"            # this world's number, 0 for the first
ENV_CHECKPOINT = "MXPLUGIN_ELASTIC_CHECKPOINT"  # --checkpoint-path, absolute
# A crash on the core's thread while the world runs ends a rank with
# EXIT_WORLD_CRASHED (Note [Crashes under a running world] in src/common/crash_exit.h)
ENV_WORLD_CRASH_EXIT = "MXPLUGIN_WORLD_CRASH_EXIT_CODE"
# "0" keeps such crashes crashes, with their core dumps: for catching one
# (bench/chaos_loop.py --crashes-stay)
ENV_CRASH_EXIT = "MXPLUGIN_CRASH_EXIT"
TOKEN_HEADER = "X-Mxplugin-Token"
COMMIT_HEADER = "X-Mxplugin-Commit"
STOP_HEADER = "X-Mxplugin-Stop"  # on /broken's answer: the user stopped the job, end now
# Exit code of a rank that leaves so that the launcher starts a new world.
EXIT_RESET = 75
# Exit code of a rank whose MPI crashed under its core's thread while its
# world ran, most likely as a peer ended (Note [Crashes under a running
# world] in src/common/crash_exit.h): a crash, judged as any other (Note
# [One rule for a world's end] in rank_ends.py).
EXIT_WORLD_CRASHED = 78
# The timeouts of the ranks' talk with the launcher: timeouts.py.

# Note [Single copy in elastic jobs]: between ranks of one host MPICH reads
# a large message straight from the sender's memory (process_vm_readv,
# "CMA"). When the sender is killed in the middle, that read fails and a
# survivor may go on with part of the result never written: in an elastic
# job survivors live on and commit, so wrong numbers could be handed over.
# So elastic ranks run with it off, through MPICH's shared-memory cells,
# which outlive the sender, unless the user set it. Its cost, on the flat
# MPI path only (the default path within a host is mxplugin's own shared
# memory): 1.0-1.7x, median 1.2x, for 64 KB-16 MB at 2 ranks
# (bench/single_copy.py). A plain job keeps it: there mpiexec ends every
# rank when one dies.
SURVIVOR_MPI_ENV = {"MPIR_CVAR_CH4_CMA_ENABLE": "0"}
