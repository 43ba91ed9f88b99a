"""One table of the launcher's timeouts (mxplugin_run/timeouts.py): its
order holds, a table that breaks it is refused naming the rule, and no
other file of the launcher or the elastic ranks defines a timeout of its own."""
import ast
import glob
import os

import pytest

from mpi_harness import REPO
from mxplugin_run import timeouts

TABLE = {k: v for k, v in vars(timeouts).items() if k.endswith("_S")}


def test_the_table_keeps_its_order():
    timeouts.check_order(TABLE)
    assert len(timeouts.ORDER) >= 8


@pytest.mark.parametrize("rule", range(len(timeouts.ORDER)))
def test_a_table_that_breaks_a_rule_is_refused_naming_it(rule):
    (shorter, longer), why = timeouts.ORDER[rule]
    broken = {**TABLE, shorter: TABLE[longer] + 1}
    with pytest.raises(ValueError) as info:
        timeouts.check_order(broken)
    assert f"{shorter} ({TABLE[longer] + 1:g} s) must be less than {longer}" in str(info.value)


def test_a_stop_stays_within_its_bound_and_seconds_are_positive():
    with pytest.raises(ValueError, match="STOP_BOUND_S"):
        timeouts.check_order({**TABLE, "GIVE_UP_AFTER_S": 6, "DRAIN_ABANDONED_S": 4.5, "STOP_BOUND_S": 10})
    with pytest.raises(ValueError, match="SETTLE_S = 0"):
        timeouts.check_order({**TABLE, "SETTLE_S": 0})


def test_no_other_launcher_file_defines_a_timeout():
    """A module-level NAME_S = <number> outside the table, in the launcher's
    package or the elastic ranks' side."""
    own = []
    paths = sorted(glob.glob(os.path.join(REPO, "mxplugin_run", "**", "*.py"), recursive=True)
                   + glob.glob(os.path.join(REPO, "mxplugin", "elastic", "*.py")))
    assert len(paths) > 30, paths
    for path in paths:
        if path.endswith("timeouts.py"):
            continue
        for node in ast.parse(open(path).read()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                own += [f"{os.path.relpath(path, REPO)}: {t.id}" for t in node.targets
                        if isinstance(t, ast.Name) and t.id.endswith("_S")]
    assert own == []
