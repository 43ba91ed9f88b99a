"""The packages' shape (docs/architecture.md, the map of rooms): no import
circles among the modules of mxplugin and mxplugin_run, counting imports
inside functions too; the launcher's package (mxplugin_run, the processes
that never import MXNet) importing neither MXNet nor mxplugin, and
mxplugin importing of it only what the ranks and the launcher share; no
source file longer than MOST_LINES. Read from the source with `ast`;
nothing is imported."""
import ast
import os

import pytest

from mpi_harness import REPO

PACKAGES = ("mxplugin", "mxplugin_run")
# What mxplugin may import of the launcher's package: the names and codes
# both sides speak (protocol), the timeouts' one table, and the facts about
# MPIs the loader shares; mxplugin.run is `python -m mxplugin.run`, kept.
SHARED_WITH_RANKS = {"mxplugin_run.protocol", "mxplugin_run.timeouts", "mxplugin_run.mpi_family", "mxplugin_run.phases"}
OLD_ENTRY = {"mxplugin.run": {"mxplugin_run.run"}}
# A file past a few hundred lines holds more than one job (STYLE.md, "Small things that add up"): split it.
MOST_LINES = 400


def modules():
    """{module name: path} of every .py of both packages."""
    found = {}
    for package in PACKAGES:
        for base, _, files in os.walk(os.path.join(REPO, package)):
            for name in files:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(base, name), REPO)[:-3].replace(os.sep, ".")
                    found[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(base, name)
    return found


def imports_of(path, module, known):
    """The package's modules that `module` imports, anywhere in its file;
    `from a import b` counts as a.b when that is a module."""
    tree = ast.parse(open(path).read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        out.update(name for name in names if name.split(".")[0] in PACKAGES + ("mxnet",))
    return out


def graph():
    known = modules()
    return {m: imports_of(p, m, known) for m, p in known.items()}, known


def test_no_import_circles():
    edges, known = graph()
    edges = {m: {i for i in targets if i in known and i != m} for m, targets in edges.items()}
    # a package's __init__ importing its own modules is how packages are made; a module importing its
    # package (for a sibling) leads back to it. Circles are looked for among the modules themselves.
    for m, targets in edges.items():
        edges[m] = {t for t in targets if not m.startswith(t + ".") and not t.startswith(m + ".")}
    state, circles = {}, []

    def visit(m, path):
        state[m] = "open"
        for t in sorted(edges[m]):
            if state.get(t) == "open":
                circles.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_launcher_package_imports_neither_mxnet_nor_mxplugin():
    edges, _ = graph()
    launcher = {m: targets for m, targets in edges.items() if m.split(".")[0] == "mxplugin_run"}
    assert len(launcher) > 20, f"the launcher's modules not found: {sorted(launcher)}"
    wrong = {m: sorted(t for t in targets if t.split(".")[0] != "mxplugin_run") for m, targets in launcher.items()}
    wrong = {m: t for m, t in wrong.items() if t}
    assert not wrong, f"the launcher's package imports what it must not: {wrong}"


def test_mxplugin_imports_of_the_launcher_only_what_both_share():
    edges, _ = graph()
    wrong = {m: sorted(t for t in targets if t.split(".")[0] == "mxplugin_run" and t not in SHARED_WITH_RANKS
                       and t not in OLD_ENTRY.get(m, ()))
             for m, targets in edges.items() if m.split(".")[0] == "mxplugin"}
    wrong = {m: t for m, t in wrong.items() if t}
    assert not wrong, f"mxplugin imports launcher code beyond what both sides share: {wrong}"


@pytest.mark.parametrize("room", ["mxplugin_run", "mxplugin_run/elastic", "mxplugin/training", "mxplugin/elastic",
                                  "mxplugin/parallel", "mxplugin/gluonts"])
def test_every_room_is_a_package_with_its_job_said(room):
    init = os.path.join(REPO, room, "__init__.py")
    assert os.path.exists(init), f"{room} is not a package"
    assert ast.get_docstring(ast.parse(open(init).read())), f"{room}/__init__.py says nothing of its job"


def test_no_source_file_outgrows_a_few_hundred_lines():
    long = {}
    for base, _, files in [walked for package in PACKAGES for walked in os.walk(os.path.join(REPO, package))]:
        for name in files:
            if name.endswith((".py", ".pyx", ".pxi")):
                path = os.path.join(base, name)
                with open(path) as f:
                    count = sum(1 for _ in f)
                if count > MOST_LINES:
                    long[os.path.relpath(path, REPO)] = count
    assert not long, f"files over {MOST_LINES} lines, split them by job: {long}"
