"""What the launcher and the ranks of an elastic job agree on: environment
variables, HTTP headers, the reset exit code. Imports nothing, so the rank
supervisor can load it without mxplugin's package (and MXNet)."""

ENV_DRIVER = "MXPLUGIN_ELASTIC_DRIVER"          # host:port of the launcher's service
ENV_TOKEN = "MXPLUGIN_ELASTIC_TOKEN"            # the job's secret, sent with every request
ENV_WORLD = "MXPLUGIN_ELASTIC_WORLD"            # this world's number, 0 for the first
ENV_CHECKPOINT = "MXPLUGIN_ELASTIC_CHECKPOINT"  # --checkpoint-path, absolute
TOKEN_HEADER = "X-Mxplugin-Token"
COMMIT_HEADER = "X-Mxplugin-Commit"
# Exit code of a rank that leaves so that the launcher starts a new world.
EXIT_RESET = 75
REQUEST_TIMEOUT_S = 30
