"""The documentation pages and the examples as a user meets them: the site
builds with the `docs` extra alone (GluonTS hidden, as in an environment
without the `gluonts` extra) and still documents mxplugin.gluonts; every
example script answers --help; examples/discover_hosts.sh prints what
mxplugin-run's discovery reads; the troubleshooting page shows messages as
plain text that wraps; the site links out to Horovod and MXNet; the user
pages refer to other sections by links, not by quoted titles; and the
benchmarks page holds no stale placeholder. Nothing here reaches the
network."""
import glob
import os
import re
import subprocess
import sys

import pytest

from mpi_harness import REPO, rank_env

DOCS = os.path.join(REPO, "docs")
EXAMPLES = os.path.join(REPO, "examples")
DISCOVER = os.path.join(EXAMPLES, "discover_hosts.sh")

# Makes `import gluonts` fail in the Python that loads it (on PYTHONPATH),
# as it fails where the `gluonts` extra is not installed.
HIDE_GLUONTS = '''import sys


class _HideGluonTS:
    def find_spec(self, name, path=None, target=None):
        if name == "gluonts" or name.startswith("gluonts."):
            raise ImportError(f"No module named {name!r} (hidden by tests/test_docs_pages.py)")
        return None


sys.meta_path.insert(0, _HideGluonTS())
'''


def _without_gluonts(tmp_path):
    hide = tmp_path / "hide_gluonts"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE_GLUONTS)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(hide) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built once, as with the `docs` extra alone: GluonTS hidden."""
    root = tmp_path_factory.mktemp("docs_pages")
    env = _without_gluonts(root)
    hidden = subprocess.run([sys.executable, "-c", "import gluonts"], capture_output=True, text=True, env=env)
    assert hidden.returncode != 0 and "hidden by" in hidden.stderr, "GluonTS is not hidden from the build"
    out = root / "site"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", DOCS, str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert done.returncode == 0, f"the site does not build without GluonTS:\n{done.stderr[-6000:]}"
    return out


def test_the_site_builds_without_gluonts_and_documents_mxplugin_gluonts(site):
    page = (site / "api" / "gluonts.html").read_text()
    assert 'id="mxplugin.gluonts.Trainer"' in page and 'id="mxplugin.gluonts.serialize"' in page
    text = re.sub(r"<[^>]+>", "", page)
    # the constructor's own signature, not a stand-in's (*args, **kwargs)
    assert re.search(r"mxplugin\.gluonts\.Trainer\(ctx=None, epochs=100", text), text[:3000]


# -- the examples -------------------------------------------------------------------

def example_scripts():
    """Every example a user runs: the shell scripts, and the Python files
    that run as programs (digits_data.py is a module they import). The
    ResNet50 example's --help is checked option by option in
    tests/test_examples.py (test_help_documents_every_option)."""
    found = sorted(glob.glob(os.path.join(EXAMPLES, "*.sh")))
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.py"))):
        if 'if __name__ == "__main__":' in open(path).read() and not path.endswith("mxnet_imagenet_resnet50.py"):
            found.append(path)
    # argparse takes -h as it takes --help; the shell scripts are checked with both
    return [pytest.param(path, flag, id=f"{os.path.basename(path)} {flag}") for path in found
            for flag in (["--help", "-h"] if path.endswith(".sh") else ["--help"])]


def _gluonts_installed():
    import importlib.util

    return importlib.util.find_spec("gluonts") is not None


@pytest.mark.parametrize("script, flag", example_scripts())
def test_every_example_answers_help(script, flag):
    if script.endswith("gluonts_deepar.py") and not _gluonts_installed():
        pytest.skip("needs the gluonts extra (pip install -e '.[gluonts]')")
    # Outside a Slurm job: slurm_job.sh must not need its variables for --help.
    env = {k: v for k, v in rank_env().items() if not k.startswith("SLURM_")}
    runner = ["bash"] if script.endswith(".sh") else [sys.executable]
    done = subprocess.run(runner + [script, flag], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert done.returncode == 0, f"{script} {flag}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.startswith("usage:") and len(done.stdout.split()) > 20, done.stdout


def test_slurm_job_outside_slurm_says_how_to_submit_it():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    done = subprocess.run(["bash", os.path.join(EXAMPLES, "slurm_job.sh")], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env=env)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "sbatch" in done.stderr and "unbound variable" not in done.stderr, done.stderr


def test_the_example_scripts_are_executable():
    for name in ("discover_hosts.sh", "slurm_job.sh"):
        assert os.access(os.path.join(EXAMPLES, name), os.X_OK), name


def _discover(args, env=None, cwd=None):
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run([DISCOVER, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**base, **(env or {})})


HOST_LINE = re.compile(r"^[^\s:#]+(?::[1-9][0-9]*)?$")


def test_discover_hosts_prints_the_hosts_of_a_file_as_host_slots_lines(tmp_path):
    from mxplugin_run.elastic.discovery import DiscoveryScript, parse_discovered

    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# the job's hosts\nserver1:2\n\n  server2 slots=4   # a --hostfile line\nserver3\n"
                     "server4 max_slots=8 slots=3\nlast:1")  # no newline at the end
    done = _discover([str(hosts)])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == ["server1:2", "server2:4", "server3", "server4:3", "last:1"], lines
    assert all(HOST_LINE.match(line) for line in lines), lines
    # what the launcher makes of it, run as the launcher runs it (through the shell, with its argument)
    expected = [("server1", 2), ("server2", 4), ("server3", 1), ("server4", 3), ("last", 1)]
    assert parse_discovered(done.stdout, DISCOVER) == expected
    assert DiscoveryScript(f"{DISCOVER} {hosts}").find() == expected


def test_discover_hosts_lists_a_slurm_allocation(tmp_path):
    """Without a file, inside an allocation: its nodes (scontrol, faked
    here) with SLURM_TASKS_PER_NODE's counts ("2(x3),1")."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames node[1-3],gpu7" ] || exit 9\n'
                        'printf "node1\\nnode2\\nnode3\\ngpu7\\n"\n')
    scontrol.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node[1-3],gpu7",
           "SLURM_TASKS_PER_NODE": "2(x3),1"}
    done = _discover([], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["node1:2", "node2:2", "node3:2", "gpu7:1"], done.stdout
    failing = _discover([], {**env, "SLURM_JOB_NODELIST": "other[1-2]"})  # scontrol fails: so does the script
    assert failing.returncode != 0 and failing.stdout == "", (failing.returncode, failing.stdout)


def test_discover_hosts_fails_saying_why(tmp_path):
    missing = _discover([str(tmp_path / "absent.txt")])
    assert missing.returncode == 1 and "cannot read" in missing.stderr and missing.stdout == "", missing
    nothing = _discover([])
    assert nothing.returncode == 2 and "hosts file" in nothing.stderr, nothing


def test_the_elastic_guide_gives_the_discovery_script_command():
    text = open(os.path.join(DOCS, "guides", "elastic.md")).read()
    assert '--host-discovery-script "examples/discover_hosts.sh hosts.txt"' in text


# -- the pages ----------------------------------------------------------------------

def test_troubleshooting_shows_messages_as_plain_text_that_wraps(site):
    source = open(os.path.join(DOCS, "guides", "troubleshooting.md")).read()
    openings = re.findall(r"^```(.*)$", source, re.M)[::2]  # fences alternate: opening, closing
    assert openings and all(language in ("text", "bash", "python") for language in openings), openings
    assert "## Installing and building" in source
    page = (site / "guides" / "troubleshooting.html").read_text()
    assert "highlight-text" in page and "highlight-default" not in page and "highlight-python" not in page
    assert 'id="installing-and-building"' in page
    assert "_static/mxplugin.css" in page
    css = (site / "_static" / "mxplugin.css").read_text()
    assert re.search(r"\.highlight-text pre\s*\{[^}]*white-space:\s*pre-wrap", css), css


def test_the_site_links_to_horovod_and_mxnet(site):
    index = (site / "index.html").read_text()
    for url in ("https://horovod.readthedocs.io/", "https://mxnet.apache.org/"):
        assert f'href="{url}"' in index, url
    assert 'href="https://horovod.readthedocs.io/"' in (site / "guides" / "horovod.html").read_text()
    readme = open(os.path.join(REPO, "README.md")).read()
    assert "(https://horovod.readthedocs.io/)" in readme and "(https://mxnet.apache.org/)" in readme


# The pages users read and the examples' text: other sections are linked,
# not named in quotes ("see "Several machines" below", (README, "GluonTS")),
# and no test file is named.
USER_TEXT = sorted([os.path.join(DOCS, name) for name in ("index.md", "parallelism.md", "scaling.md")] +
                   glob.glob(os.path.join(DOCS, "guides", "*.md")) + glob.glob(os.path.join(DOCS, "api", "*.md")) +
                   [os.path.join(REPO, "README.md")] +
                   [p for p in glob.glob(os.path.join(EXAMPLES, "*")) if os.path.isfile(p)])
QUOTED_SECTION = re.compile(r'\(README, |see "[A-Z]|\("[A-Z][^"]*"\)|`, "[A-Z][^"]*"\)|"[A-Z][^"]*" (?:below|above)'
                            r'|\([a-z][\w ]*, (?:below|above)\)|"[A-Z][^"]*" page\b')
TEST_FILE = re.compile(r"\btests/\w+\.py\b")


def test_user_pages_link_sections_rather_than_quote_their_titles():
    assert QUOTED_SECTION.search('see "Several machines" below') and QUOTED_SECTION.search("(uneven data, below)")
    assert QUOTED_SECTION.search('(README, "GluonTS")') and QUOTED_SECTION.search('("Running on a cluster")')
    assert not QUOTED_SECTION.search("[several machines](several-machines.md), a cool-down (below)")
    found = []
    for path in USER_TEXT:
        if path.endswith((".npz", ".png")):
            continue
        for number, line in enumerate(open(path, errors="replace").read().splitlines(), 1):
            for pattern in (QUOTED_SECTION, TEST_FILE) if path.startswith(EXAMPLES) else (QUOTED_SECTION,):
                for match in pattern.finditer(line):
                    found.append(f"{os.path.relpath(path, REPO)}:{number}: {match.group(0)}")
    assert not found, "\n".join(found)


def test_the_benchmarks_page_holds_no_placeholder():
    text = open(os.path.join(DOCS, "benchmarks.md")).read()
    assert "Not measured yet" not in text
    assert not re.search(r"^Load [\d.]+-[\d.]+\.$", text, re.M)
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import report_clusters

    assert report_clusters.fault_timings_section(None) == [] and report_clusters.mpi_variants_section(None, "") == []
