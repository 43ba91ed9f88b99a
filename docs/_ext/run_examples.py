"""Runs the Examples sections of the API reference as doctests, on every
rank of the job it is started in (`mxplugin-run -np 2 python
docs/_ext/run_examples.py [NAME-PREFIX ...]`); exits 1 when one fails or
none ran."""
import doctest
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import public_api  # noqa: E402


def main(prefixes):
    failed = tried = 0
    for qualified, obj in public_api.examples():
        if prefixes and not qualified.startswith(tuple(prefixes)):
            continue
        for test in doctest.DocTestFinder(recurse=False).find(obj, qualified, globs={}):
            result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
            failed, tried = failed + result.failed, tried + result.attempted
    print(f"examples tried: {tried}, failed: {failed}")
    return 1 if failed or not tried else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
