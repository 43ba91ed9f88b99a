"""Sphinx configuration of mxplugin's documentation site.

    pip install -e '.[test]'           # Sphinx, MyST and the theme come with the test extras
    python -m sphinx -W -b html docs docs/_build/html

Pages are Markdown (MyST); the API reference is generated from the
docstrings (autodoc), and the launcher's options from its own argparse
parser (docs/api/launcher.md's `mxplugin-run-options` directive), so
what the docs say and what the code takes cannot drift apart. -W makes
every warning (a broken cross-reference, a page missing from the tree, an
undocumented public name) an error."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # this checkout's mxplugin
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "mxplugin"
author = "the mxplugin developers"
copyright = "2026, the mxplugin developers"
release = "0.1.0"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "public_api"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
# Options are typed as written: no "--" turned into an en dash.
smartquotes = False

html_theme = "furo"
html_title = "mxplugin"
html_static_path = []

autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
# Defaults as the source writes them (Compression.none, global_process_set),
# not their repr.
autodoc_preserve_defaults = True
