"""The package's shape (docs/architecture.md, the map of rooms): no import
circles among mxplugin's modules, counting imports inside functions too,
and the launcher's room (mxplugin/launch/, the process that never imports
MXNet) importing neither MXNet nor the training or collectives code; no
source file longer than MOST_LINES. Read from the source with `ast`;
nothing is imported."""
import ast
import os

import pytest

from mpi_harness import REPO

PACKAGE = os.path.join(REPO, "mxplugin")
# What the launcher's room may import of mxplugin: itself, the facts about
# MPIs it shares with the loader, and the elastic launcher's side.
LAUNCH_MAY_IMPORT = ("mxplugin.launch", "mxplugin.mpi_family", "mxplugin.errors", "mxplugin.elastic.driver",
                     "mxplugin.elastic.discovery", "mxplugin.elastic.cooldown", "mxplugin.elastic.service",
                     "mxplugin.elastic.protocol", "mxplugin.elastic.world_end", "mxplugin.elastic.timeouts",
                     "mxplugin._build_info")
# --check-build loads the core as the ranks would, to report what really loads (CUDA, NCCL, the libraries).
LAUNCH_EXCEPTIONS = {"mxplugin.launch.build_report": {"mxplugin", "mxplugin._loader"}}
# A file past a few hundred lines holds more than one job (STYLE.md, "Small things that add up"): split it.
MOST_LINES = 400


def modules():
    """{module name: path} of every .py of the package."""
    found = {}
    for base, _, files in os.walk(PACKAGE):
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
        out.update(name for name in names if name.split(".")[0] in ("mxplugin", "mxnet"))
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


def test_the_launcher_room_imports_no_mxnet_and_no_training():
    edges, _ = graph()
    launch = {m: targets for m, targets in edges.items() if m.startswith("mxplugin.launch")}
    assert launch, "no mxplugin.launch modules found"
    wrong = {m: sorted(t for t in targets if not t.startswith(LAUNCH_MAY_IMPORT) and t not in LAUNCH_EXCEPTIONS.get(m, ()))
             for m, targets in launch.items()}
    wrong = {m: t for m, t in wrong.items() if t}
    assert not wrong, f"the launcher's room imports what it must not: {wrong}"


@pytest.mark.parametrize("room", ["launch", "training", "elastic", "parallel", "gluonts"])
def test_every_room_is_a_package_with_its_job_said(room):
    init = os.path.join(PACKAGE, room, "__init__.py")
    assert os.path.exists(init), f"mxplugin/{room} is not a package"
    assert ast.get_docstring(ast.parse(open(init).read())), f"mxplugin/{room}/__init__.py says nothing of its job"


def test_no_source_file_outgrows_a_few_hundred_lines():
    long = {}
    for base, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith((".py", ".pyx", ".pxi")):
                path = os.path.join(base, name)
                with open(path) as f:
                    count = sum(1 for _ in f)
                if count > MOST_LINES:
                    long[os.path.relpath(path, REPO)] = count
    assert not long, f"files over {MOST_LINES} lines, split them by job: {long}"
