"""Sphinx extension of mxplugin's docs: the public API, whose every name must
have a docstring (an undocumented one is a warning, so an error under -W),
and the `mxplugin-run-options` directive, which renders the launcher's
options from its own argparse parser."""
import argparse
import importlib
import inspect
import re

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


def _target(obj):
    """What a public name's docstring and signature belong to."""
    if isinstance(obj, (classmethod, staticmethod)):
        return obj.__func__
    return obj.fget if isinstance(obj, property) else obj


def _signature_names(obj):
    """The parameters a user passes, as numpydoc names them (`*args`, `**kwargs`)."""
    try:
        signature = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    except (TypeError, ValueError):
        return []
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [stars.get(p.kind, "") + name for name, p in signature.parameters.items() if name not in ("self", "cls")]


_PARAMETERS = "\nParameters\n----------\n"


def parameters_unlisted():
    """[(qualified name, signature's parameters, those listed)] for every
    public callable whose numpydoc Parameters section does not list each
    parameter of its signature, in order (a property takes none)."""
    found = []
    for package in PUBLIC_PACKAGES:
        for qualified, obj in public_names(package):
            if isinstance(obj, property):
                continue
            target = _target(obj)
            wanted = _signature_names(target)
            if inspect.isclass(target) and not inspect.isfunction(target.__init__):
                wanted = []  # the constructor of object or Exception: nothing of its own
            if not wanted:
                continue
            doc = inspect.getdoc(target) or ""
            listed = re.findall(r"^(\*{0,2}\w+) : ", doc.split(_PARAMETERS, 1)[1], re.M) if _PARAMETERS in doc \
                else []
            if listed[:len(wanted)] != wanted:
                found.append((qualified, wanted, listed))
    return found


def examples():
    """[(qualified name, object)] of the public functions and classes (not
    their members): each has an Examples section."""
    found = [(qualified, obj) for package in PUBLIC_PACKAGES for qualified, obj in public_names(package)
             if qualified.count(".") == package.count(".") + 1]
    return sorted(found, key=lambda entry: entry[0] == "mxplugin.shutdown")  # its example ends the run


def without_example():
    """The public functions and classes whose docstring has no Examples section."""
    return [qualified for qualified, obj in examples()
            if "\nExamples\n--------\n>>> " not in (inspect.getdoc(_target(obj)) or "")]


_PUBLIC_CLASSES = set()


def _index_public_classes(app):
    for package in PUBLIC_PACKAGES:
        _PUBLIC_CLASSES.update(f"{obj.__module__}.{obj.__name__}" for _, obj in public_names(package)
                               if inspect.isclass(obj))


def _check_docstrings(app):
    for qualified in undocumented():
        _log.warning(f"public name without a docstring: {qualified}")


def option_synopsis(action):
    """How a user writes the option: its names and its arguments'
    placeholders (a tuple metavar as its words, `--blacklist-cooldown-range
    MIN MAX`)."""
    names = ", ".join(action.option_strings) or action.dest
    if action.nargs == 0 or not (action.metavar or action.option_strings):
        return names
    metavar = action.metavar or action.dest.upper()
    words = " ".join(metavar) if isinstance(metavar, tuple) else metavar
    return f"{names} {words}"


class LauncherOptions(Directive):
    """`mxplugin-run`'s options, grouped as its --help groups them, from the
    parser the launcher uses; each option's synopsis as a literal."""

    def run(self):
        from mxplugin_run.run import build_parser

        parser = build_parser()
        sections = []
        for group in parser._action_groups:
            actions = [a for a in group._group_actions
                       if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
            if not actions:
                continue
            table = nodes.definition_list()
            for action in actions:
                item = nodes.definition_list_item()
                term = nodes.term()
                term += nodes.literal(text=option_synopsis(action))
                item += term
                body = nodes.definition()
                body += nodes.paragraph(text=(action.help or "") % {"default": action.default, "prog": parser.prog})
                item += body
                table += item
            title = nodes.rubric(text=group.title[:1].upper() + group.title[1:])
            sections += [title, table]
        return sections


def _public_bases(app, name, obj, options, bases):
    """A class's bases as users see them: mxplugin's internal mixins
    (BucketUpdates, TrainerStates, ...) left out."""
    bases[:] = [b for b in bases if not (b.__module__.startswith("mxplugin") and
                                         f"{b.__module__}.{b.__name__}" not in _PUBLIC_CLASSES)] or [object]


def setup(app):
    app.connect("builder-inited", _check_docstrings)
    app.connect("builder-inited", _index_public_classes)
    app.connect("autodoc-process-bases", _public_bases)
    app.add_directive("mxplugin-run-options", LauncherOptions)
    return {"parallel_read_safe": True, "version": "1"}
