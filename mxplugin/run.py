"""`python -m mxplugin.run`, kept for scripts that start the launcher so:
the same as mxplugin-run (mxplugin_run/run.py), after mxplugin's own import,
which loads MXNet. `python -m mxplugin_run` starts without it."""
import sys

from mxplugin_run.run import main

if __name__ == "__main__":
    sys.exit(main())
