"""python -m mxplugin_run: the same as the mxplugin-run command."""
import sys

from mxplugin_run.run import main

if __name__ == "__main__":
    sys.exit(main())
