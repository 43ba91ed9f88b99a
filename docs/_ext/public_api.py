"""Sphinx extension of mxplugin's docs: the public API, whose every name must
have a docstring (an undocumented one is a warning, so an error under -W),
and the `mxplugin-run-options` directive, which renders the launcher's
options from its own argparse parser."""
import argparse
import importlib
import inspect

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.util import logging

_log = logging.getLogger(__name__)

# Packages whose public names the reference documents (`__all__`, or the top level's _api.__all__).
PUBLIC_PACKAGES = ("mxplugin", "mxplugin.parallel", "mxplugin.elastic", "mxplugin.gluonts")


def public_names(package):
    """[(qualified name, object)] of `package`'s public API: what its
    __all__ exports (classes, functions) and their public members."""
    module = importlib.import_module("mxplugin._api" if package == "mxplugin" else package)
    found = []
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name)
        if inspect.ismodule(obj) or isinstance(obj, (bool, int, float, str)):
            continue
        found.append((f"{package}.{name}", obj))
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if not member.startswith("_") and (callable(value) or isinstance(value, (property, classmethod,
                                                                                         staticmethod))):
                    found.append((f"{package}.{name}.{member}", value))
    return found


def undocumented():
    """Every public name without a docstring of its own or inherited."""
    missing = []
    for package in PUBLIC_PACKAGES:
        for qualified, obj in public_names(package):
            target = obj.__func__ if isinstance(obj, (classmethod, staticmethod)) else obj
            if not (inspect.getdoc(target) or "").strip():
                missing.append(qualified)
    return missing


def _check_docstrings(app):
    for qualified in undocumented():
        _log.warning(f"public name without a docstring: {qualified}")


class LauncherOptions(Directive):
    """A table of `mxplugin-run`'s options, from the parser the launcher uses."""

    def run(self):
        from mxplugin_run.run import build_parser

        parser = build_parser()
        table = nodes.definition_list()
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            names = ", ".join(action.option_strings) or action.dest
            if action.metavar or (action.nargs != 0 and action.option_strings):
                names += f" {action.metavar or action.dest.upper()}"
            item = nodes.definition_list_item()
            item += nodes.term(text=names)
            body = nodes.definition()
            text = (action.help or "") % {"default": action.default, "prog": parser.prog}
            body += nodes.paragraph(text=text)
            item += body
            table += item
        return [table]


def setup(app):
    app.connect("builder-inited", _check_docstrings)
    app.add_directive("mxplugin-run-options", LauncherOptions)
    return {"parallel_read_safe": True, "version": "1"}
