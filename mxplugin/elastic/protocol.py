"""What the launcher and the ranks of an elastic job agree on: environment
variables, HTTP headers, the reset exit code. Imports nothing, so the rank
supervisor can load it without mxplugin's package (and MXNet)."""

ENV_DRIVER = "MXPLUGIN_ELASTIC_DRIVER"          # host:port of the launcher's service
ENV_TOKEN = "MXPLUGIN_ELASTIC_TOKEN"            # the job's secret, sent with every request
ENV_WORLD = "MXPLUGIN_ELASTIC_WORLD"            # this world's number, 0 for the first
ENV_CHECKPOINT = "MXPLUGIN_ELASTIC_CHECKPOINT"  # --checkpoint-path, absolute
TOKEN_HEADER = "X-Mxplugin-Token"
COMMIT_HEADER = "X-Mxplugin-Commit"
STOP_HEADER = "X-Mxplugin-Stop"  # on /broken's answer: the user stopped the job, end now
# Exit code of a rank that leaves so that the launcher starts a new world.
EXIT_RESET = 75
REQUEST_TIMEOUT_S = 30
# The launcher answers a rank's long poll (/broken) within LONG_POLL_S and
# the rank asks again at once: a rank that hears nothing for
# LAUNCHER_GONE_S leaves, and the launcher takes a rank it has not heard
# from for RANK_SILENT_S for cut off (Note [Partitions] in world_end.py).
LONG_POLL_S = 5
RANK_SILENT_S = 15
LAUNCHER_GONE_S = 20
