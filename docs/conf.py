"""Sphinx configuration of mxplugin's documentation site.

    pip install -e '.[docs]'           # Sphinx, MyST and the theme (the test extras have them too)
    python -m sphinx -W -b html docs docs/_build/html

Pages are Markdown (MyST); the API reference is generated from the
docstrings (autodoc), and the launcher's options from its own argparse
parser (docs/api/launcher.md's `mxplugin-run-options` directive), so
what the docs say and what the code takes cannot drift apart. -W makes
every warning (a broken cross-reference, a page missing from the tree, an
undocumented public name) an error."""
import importlib.abc
import importlib.machinery
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # this checkout's mxplugin
sys.path.insert(0, os.path.join(HERE, "_ext"))


class _StandInModule(types.ModuleType):
    """A module of the stand-in for GluonTS: any name asked of it is a
    plain class of that name, made once (so subclasses keep their own
    constructors' signatures), and any submodule is another stand-in."""

    __path__ = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        made = type(name, (), {"__module__": self.__name__, "__doc__": f"A stand-in for {self.__name__}.{name}."})
        setattr(self, name, made)
        return made


class _StandInForGluonTS(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "gluonts" or fullname.startswith("gluonts."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        if spec.name == "gluonts.core.component":
            # @validated() changes nothing: Trainer's constructor keeps its signature and docstring
            module.validated = lambda *args, **kwargs: (lambda function: function)
        return module

    def exec_module(self, module):
        pass


def _stand_in_for_gluonts():
    """Lets the site build with the `docs` extra alone, without GluonTS (the
    `gluonts` extra): where `gluonts.mx` does not import, a stand-in for
    GluonTS answers its imports for the whole build, so that
    mxplugin.gluonts imports and its docstrings are documented as they are.
    (autodoc_mock_imports would not do: the public_api extension imports
    every public package when the build starts, outside autodoc; and a
    subclass of autodoc's mock objects shows its constructor as
    `(*args, **kwargs)`.)"""
    try:
        import mxplugin.gluonts  # noqa: F401  (it imports GluonTS without its JSON notice)
        return
    except ImportError:
        pass
    for name in [m for m in sys.modules if m == "gluonts" or m.startswith("gluonts.")]:
        del sys.modules[name]  # what a failed import left
    if not any(isinstance(finder, _StandInForGluonTS) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StandInForGluonTS())


_stand_in_for_gluonts()

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
html_static_path = ["_static"]
html_css_files = ["mxplugin.css"]  # ```text blocks wrap their long lines

autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
# Defaults as the source writes them (Compression.none, global_process_set),
# not their repr.
autodoc_preserve_defaults = True
