"""The API reference of mxplugin.parallel. Each public name keeps its summary
as its docstring where it is defined; its reference sections (the equivalent
elsewhere, Parameters, Returns, Raises, Examples) are kept apart, in the
_reference_* modules, so that the code stays short to read, and are attached
by `reference`. Together they are what the reference pages show."""
import inspect


def reference(sections):
    """Decorator: completes the docstring (the summary) of a function, class
    or method with the numpydoc `sections` (text: an "Equivalent: ..." line
    and the sections, each a title underlined with dashes)."""
    def complete(obj):
        summary = inspect.cleandoc(obj.__doc__ or "")
        obj.__doc__ = f"{summary}\n\n{inspect.cleandoc(sections)}\n"
        return obj
    return complete


# Wordings several entries share.

NAME = """name : str, optional
    A label the collectives' names are made of, the same on every rank
    (errors name it); calls are told apart by their order, which must be
    the same on every rank of the set."""

PROCESS_SET = """process_set : ProcessSet, default ``global_process_set``
    The ranks taking part, a set registered with
    ``mxplugin.add_process_set`` (``global_process_set``: every rank);
    ranks outside it must not call."""

SET_ERRORS = """TypeError
    When ``x`` is not an array, ``process_set`` not a ProcessSet or
    ``name`` not a str.
ArgumentError
    When ``process_set`` is not registered."""

KWARGS_BLOCK = """**kwargs : dict
    Passed on to ``gluon.HybridBlock``: ``prefix``, ``params``."""

F_ARGUMENT = """F : module
    The operator namespace Gluon passes: ``mxnet.nd`` (the block runs
    imperatively only)."""

NOT_HYBRID = """NotImplementedError
    When ``F`` is the symbol namespace: the block was traced into a
    hybridized parent's graph, which its collectives cannot join."""
