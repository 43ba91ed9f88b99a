"""The documentation site (docs/, Sphinx): it builds with warnings as errors
(broken cross-references, pages missing from the tree, undocumented public
names fail it), every public name has a docstring, every local link and
image of the built site resolves, the code blocks the guides mark
runnable run at 1 and 2 ranks, and the main pages render in headless
Chromium (skipped, saying why, where Debian's `chromium` is not installed)."""
import html.parser
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import zlib

import pytest

from mpi_harness import REPO, rank_env, run_command

DOCS = os.path.join(REPO, "docs")
sys.path.insert(0, os.path.join(DOCS, "_ext"))

import public_api  # noqa: E402  (docs/_ext/public_api.py)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built once for this module (into a temporary directory)."""
    out = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", DOCS, str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, f"the site does not build with warnings as errors:\n{done.stderr[-6000:]}"
    return out


def test_the_site_builds_with_warnings_as_errors(site):
    for page in ("index.html", "guides/horovod.html", "api/mxplugin.html", "benchmarks.html", "architecture.html"):
        assert (site / page).is_file(), page


def test_every_public_name_has_a_docstring():
    missing = public_api.undocumented()
    assert not missing, f"public names without a docstring: {missing}"


def test_every_public_callable_lists_each_parameter_of_its_signature():
    """numpydoc Parameters, in the signature's order, for every function,
    class (its constructor) and method of the public API that takes any."""
    unlisted = public_api.parameters_unlisted()
    assert not unlisted, "entries whose Parameters section lacks parameters of the signature:\n" + "\n".join(
        f"  {q}: signature {wanted}, listed {listed}" for q, wanted, listed in unlisted)


def test_every_public_function_and_class_has_an_example():
    missing = public_api.without_example()
    assert not missing, f"public functions and classes without an Examples section: {missing}"


def test_the_reference_examples_run_on_2_ranks():
    """Every Examples section of the API reference runs as a doctest on each
    of 2 ranks (under mxplugin-run, as a user would run it)."""
    rc, out, err = run_command([sys.executable, "-m", "mxplugin_run", "-np", "2", sys.executable,
                                os.path.join(DOCS, "_ext", "run_examples.py")], timeout=600)
    assert rc == 0, f"exit {rc}\n--- stdout\n{out[-6000:]}\n--- stderr\n{err[-3000:]}"


def test_the_api_reference_documents_every_public_name(site):
    """Each public function and class of the four packages has its entry (an anchor of its own)."""
    pages = "".join((site / "api" / f"{name}.html").read_text() for name in ("mxplugin", "parallel", "elastic",
                                                                              "gluonts"))
    absent = [q for package in public_api.PUBLIC_PACKAGES for q, obj in public_api.public_names(package)
              if q.count(".") == package.count(".") + 1 and f'id="{q}"' not in pages and
              f'id="{_defined_as(q, obj)}"' not in pages]
    assert not absent, f"public names without an entry in the API reference: {absent}"


def _defined_as(qualified, obj):
    """The name autodoc gives an object it documents where it is defined."""
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', qualified.rsplit('.', 1)[-1])}"


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])


def _local_target(page, link):
    """(file, fragment) a local link of `page` points at; None for external links."""
    parts = urllib.parse.urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
        return None
    path = (page.parent / urllib.parse.unquote(parts.path)).resolve() if parts.path else page
    if path.is_dir():
        path = path / "index.html"
    return path, parts.fragment


def test_every_local_link_and_image_resolves(site):
    """A crawl of every page: each local href/src names a file of the site,
    and each #fragment an id on its page."""
    parsed, broken = {}, []
    pages = sorted(site.rglob("*.html"))
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text())
        parsed[page.resolve()] = parser
    for page in pages:
        for link in parsed[page.resolve()].links:
            target = _local_target(page, link)
            if target is None:
                continue
            path, fragment = target
            if not path.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no such file)")
            elif fragment and path.suffix == ".html" and fragment not in parsed.get(path, _Links()).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken[:40])
    images = re.findall(r'<img [^>]*src="([^"]+)"', (site / "benchmarks.html").read_text())
    assert len(images) >= 4, f"the benchmarks page shows {len(images)} plots"
    for src in images:
        assert (site / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src


def runnable_blocks():
    """pytest params (page, index, code), named page.index, of every ```python
    block marked <!-- runnable --> in docs/."""
    found = []
    for root, _, files in os.walk(DOCS):
        if "_build" in root:
            continue
        for name in sorted(files):
            if name.endswith(".md"):
                path = os.path.join(root, name)
                text = open(path).read()
                for i, code in enumerate(re.findall(r"<!-- runnable -->\n```python\n(.*?)```", text, re.S)):
                    page = os.path.relpath(path, DOCS)
                    found.append(pytest.param(page, i, code, id=f"{page}.{i}"))
    return found


@pytest.mark.parametrize("page, index, code", runnable_blocks())
@pytest.mark.parametrize("ranks", [1, 2])
def test_runnable_code_blocks_run(page, index, code, ranks, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(code)
    cmd = [sys.executable, "-m", "mxplugin_run", "-np", str(ranks), sys.executable, str(script)]
    rc, out, err = run_command(cmd, 180, env=rank_env())
    assert rc == 0, f"{page} block {index} at {ranks} rank(s): exit {rc}\n{out}\n{err}"


def test_there_are_runnable_blocks():
    pages = {param.values[0] for param in runnable_blocks()}
    assert {"index.md", "guides/collectives.md", "guides/array-kinds.md"} <= pages, pages


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _png_pixels(data):
    """The raw (filtered) pixel bytes of a PNG."""
    pos, idat = 8, b""
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return zlib.decompress(idat)


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium) for screenshots")
@pytest.mark.parametrize("page", ["index.html", "guides/training.html", "api/mxplugin.html", "api/launcher.html",
                                  "benchmarks.html"])
def test_pages_render_in_headless_chromium(site, page, tmp_path):
    """The page rendered to PNG is not blank (many distinct pixel values)."""
    shot = tmp_path / "page.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1600",
           f"--screenshot={shot}", (site / page).as_uri()]
    rc, out, err = run_command(cmd, 120)
    assert rc == 0 and shot.is_file(), f"chromium: exit {rc}\n{out}\n{err}"
    pixels = _png_pixels(shot.read_bytes())
    assert len(set(pixels[::7])) > 30, f"{page} renders blank"


@pytest.mark.parametrize("page", ["api/launcher.html", "api/elastic.html", "guides/elastic.html", "guides/horovod.html"])
def test_options_read_as_typed(site, page):
    """No "--" turned into an en dash: an option copied from the page runs."""
    text = re.sub(r"<[^>]+>", "", (site / page).read_text())
    dashed = re.findall(r".{0,30}(?:\u2013|&#8211;|&ndash;)[a-z].{0,30}", text)
    assert not dashed, f"{page}: {dashed[:5]}"
    assert "--min-np" in text or page != "api/launcher.html"


# The pages written for users: the landing page, the guides and the API reference.
USER_PAGES = sorted([os.path.join(DOCS, "index.md")] +
                    [os.path.join(DOCS, part, name) for part in ("guides", "api")
                     for name in os.listdir(os.path.join(DOCS, part)) if name.endswith(".md")])

# What only contributors need, with what each is called in a failure. Paths a
# user runs or copies (examples/, bench/, gpu/, setup.py) and links to other
# pages are not among them. A hex word counts as a commit hash only with a
# digit and a letter a-f in it, so that numbers ("67108864") and words
# ("defaced") pass.
INTERNALS = (
    ("a Note [...] of the code", re.compile(r"Note \[")),
    ("a source or test file", re.compile(r"(?<![\w./-])(?:mxplugin|mxplugin_run|src|tests)/[\w./-]*\.(?:py|cc|h)\b")),
    ("a commit hash", re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")),
)


def internals_named(text):
    """(line number, what, the words) of each internal name in a page's text."""
    return [(number, what, found.group(0)) for number, line in enumerate(text.splitlines(), 1)
            for what, pattern in INTERNALS for found in pattern.finditer(line)]


def test_user_pages_name_no_internals():
    """The guides, the API reference and the landing page tell users what to
    run, what they see and what to do: they name no Note [...] of the code, no
    source or test file under mxplugin/, mxplugin_run/, src/ or tests/, and no
    commit. Such details belong on the contributors' pages (architecture.md,
    reliability.md), linked from the guides. Every offending page:line is
    reported."""
    assert internals_named("(Note [Shadow steps], `mxplugin/training/join.py`) see `tests/test_join.py` on 66ec22f")
    assert not internals_named("`examples/mxnet_digits.py`, `bench/sparse_rows.py`, `gpu/run_gpu_suite.py`, 67108864")
    offending = [f"{os.path.relpath(page, REPO)}:{number}: {what} ({words})" for page in USER_PAGES
                 for number, what, words in internals_named(open(page).read())]
    assert not offending, "user pages name internals:\n" + "\n".join(offending)
