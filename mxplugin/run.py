"""`python -m mxplugin.run` and the `mxplugin-run` entry point: the launcher
is mxplugin/launch/run.py."""
import sys

from mxplugin.launch.run import main

if __name__ == "__main__":
    sys.exit(main())
