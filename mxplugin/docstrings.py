"""One wording of each parameter the collectives (and init) share, so that every
collective's reference page lists every parameter with its type and
default in the same words: `documented(...)` completes a function's own
summary with numpydoc sections built from PARAMETERS."""
import inspect

PARAMETERS = {
    "tensor": ("NDArray or mxnet.numpy.ndarray",
               "The array, the same shape and type on every rank of the process set (a difference fails the "
               "call on every rank, naming it)."),
    "tensors": ("list of NDArray or mxnet.numpy.ndarray",
                "The arrays, negotiated and fused as one group; the same list on every rank."),
    "average": ("bool, optional", "Deprecated, as in Horovod: True is ``op=Average``, False ``op=Sum``. "
                                  "Pass ``op`` instead."),
    "name": ("str, optional", "The collective's name, the same on every rank; by default one is made from the "
                              "call's order, alike on every rank. Errors, stall warnings and the timeline show "
                              "it after the collective's kind, as Horovod names it: ``name=\"grads\"`` is "
                              "``allreduce.grads``, and an unnamed call ``allreduce.noname.<n>``."),
    "priority": ("int, default 0", "Higher runs first among the collectives ready at once (the trainer gives the "
                                   "last layers' gradients the highest)."),
    "prescale_factor": ("float, default 1.0", "Multiplies each rank's input before the reduction."),
    "postscale_factor": ("float, default 1.0", "Multiplies the result after the reduction."),
    "process_set": ("ProcessSet, default ``global_process_set``",
                    "The ranks taking part (``global_process_set``: every rank); ranks outside it must not call."),
    "op": ("Average, Sum, Min, Max or Product, default Average",
           "The reduction (``mxplugin.Average`` and so on, Horovod's values)."),
    "comm": ("None, list of int or mpi4py communicator, optional",
             "Every rank this job launched: None (mpiexec's or mxplugin-run's ranks), the list of them, or an mpi4py "
             "communicator of them (``MPI.COMM_WORLD`` or a duplicate), as horovod.mxnet takes; a subset is refused "
             "(use process sets)."),
    "process_sets": ("list of ProcessSet or \"dynamic\", optional",
                     "Process sets to register now (``add_process_set`` registers more later, on every rank)."),
    "root_rank": ("int", "The global rank (one of the process set's) whose array every rank receives."),
}


def _section(title, lines):
    return ["", title, "-" * len(title)] + lines


def documented(*names, returns=None, horovod=None, example=None, raises=()):
    """Decorator: the function's docstring (its summary) and a "Horovod:"
    line, followed by a Parameters section of `names` (each a name of
    PARAMETERS, or a (name, type, meaning) of the function's own),
    then Returns (`returns`: (type, meaning)), Raises (`raises`: (type,
    meaning) pairs) and an Examples section (`example`: doctest lines, or
    one string of them)."""
    def decorate(fn):
        lines = inspect.cleandoc(fn.__doc__ or "").splitlines()
        if horovod:  # before the sections: after them it would read as one more entry
            lines += ["", f"Horovod: {horovod}"]
        entries = []
        for entry in names:
            name, kind, meaning = (entry, *PARAMETERS[entry]) if isinstance(entry, str) else entry
            entries += [f"{name} : {kind}", f"    {meaning}"]
        lines += _section("Parameters", entries)
        if returns:
            lines += _section("Returns", [returns[0], f"    {returns[1]}"])
        if raises:
            lines += _section("Raises", [line for kind, meaning in raises for line in (kind, f"    {meaning}")])
        if example:
            lines += _section("Examples", inspect.cleandoc(example).splitlines() if isinstance(example, str)
                              else list(example))
        fn.__doc__ = "\n".join(lines) + "\n"
        return fn
    return decorate
