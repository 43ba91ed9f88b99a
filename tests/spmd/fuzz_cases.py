"""Random calls of the public collectives for check_fuzz.py, with what each
must do on each rank.

Every rank draws case `index` from one RandomState seeded by (seed, index),
making the same draws in the same order, so all ranks hold the same case;
what differs per rank (first dimensions, splits, data) is drawn for every
rank alike, and each rank's data comes from a generator of its own that
any rank can recreate. A case then is:

- valid: every calling rank gets the right numbers (checked against NumPy);
- all_bad: every rank passes the same bad argument (a wrong type, an
  unsupported dtype, a GPU array on a CPU build, a bad op, root, splits,
  priority or scale factor, an unregistered process set, ...): each raises;
- one_bad: only the odd rank passes it: every rank raises, the others
  naming the call and the odd rank;
- mismatch: the odd rank's call disagrees with the others' in what
  negotiation compares (shape, dtype, op, scale factors, root, number of
  tensors, collective under one name): every rank raises, naming the call,
  what differed and the odd rank;
- outsider: a rank outside the call's process set calls it anyway: it
  raises, the members get their numbers.

Not drawn, because they are a stall by design and check_stall.py covers
them: ranks calling under different names or on different process sets,
ranks that skip a call (an empty grouped call does nothing), a bad name
type on one rank (no name to fail the others' call under), auto-named
calls of different kinds (auto names never meet).
"""
import mxnet as mx
import numpy as np

import mxplugin as hvd
from fuzz_data import DTYPES, FLOATS, Tensor, proper_subsets

OPS = {"Average": hvd.Average, "Sum": hvd.Sum, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
FACTORS = [1.0, 1.0, 1.0, 0.5, 2.0, -1.0, 0.25, 4.0, 1.0 / 3, 0.1, 0.0]
# Names shared by many cases (the response cache, signatures that change under a
# cached name), and odd ones; None is an auto name.
NAMES = [None, None, "w", "grad.0", "", "名前/ü", "n" * 300, "sp ace\tand\nnewline", "x_1of2"]
CONTEXTS = [mx.cpu(0), mx.cpu(0), mx.cpu(0), mx.cpu(1), mx.cpu_pinned(0), mx.Context("cpu_shared", 0)]
KINDS = ["allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allgather", "grouped_allgather",
         "broadcast", "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "broadcast_object",
         "allgather_object", "process_set"]
MODES = ["valid", "all_bad", "one_bad", "mismatch", "outsider"]
MODE_WEIGHTS = [0.42, 0.18, 0.17, 0.18, 0.05]
# Exception types a refusal may have: ours (ArgumentError is a ValueError and
# an MXNetError, MismatchError and PeerFailureError are MXPluginErrors), MXNet's
# for asynchronous ops, TypeError and NotImplementedError (Adasum).
REFUSALS = (mx.base.MXNetError, hvd.MXPluginError, ValueError, TypeError, NotImplementedError)


class Case:
    """One drawn call, as every rank holds it: its kind, mode, arguments and
    the ranks that take part; text says it in a line. role(rank) and expect
    say what each rank does and should see (fuzz_calls.Call makes the call)."""

    def __init__(self, seed, index, rank, size, sets):
        self.seed, self.index, self.rank, self.size = seed, index, rank, size
        self.rng = np.random.RandomState((seed * 7919 + index) % 2 ** 32)
        self.sets = sets
        self.notes = []
        self._draw()

    # --- drawing
    def pick(self, options):
        return options[self.rng.randint(len(options))]

    def chance(self, p):
        return self.rng.rand() < p

    def shape(self, big=False):
        ndim = self.pick([0, 1, 1, 1, 2, 2, 3, 4, 8]) if self.kind in ("allreduce", "allreduce_", "broadcast",
                                                                       "broadcast_") else self.pick([1, 1, 2, 2, 3, 4, 8])
        dims = [int(self.rng.randint(0, 5)) if self.chance(0.1) else int(self.rng.randint(1, 5))
                for _ in range(ndim)]
        if ndim > 4:
            dims = [int(self.rng.randint(1, 3)) for _ in range(ndim)]
        if big:
            dims = [int(self.rng.randint(40000, 120000))] + [1] * (ndim - 1)
        return tuple(dims)

    def tensor(self, slot, dtype=None, shape=None):
        dtype = dtype or self.pick(DTYPES)
        big = shape is None and self.chance(0.04)
        shape = shape if shape is not None else self.shape(big=big)
        if dtype == "bfloat16" and not shape:  # MXNet cannot cast a 0-d array (its shape () means "unknown")
            shape = (1,)
        ctx = self.pick(CONTEXTS)
        form = self.pick(["plain", "plain", "plain", "view", "reshape"])
        if not shape or 0 in shape:
            form = "plain"
        return Tensor(self, slot, dtype, shape, ctx, form)

    def _draw(self):
        n = self.size
        self.kind = self.pick(KINDS)
        self.mode = self.rng.choice(MODES, p=MODE_WEIGHTS)
        self.name = self.pick(NAMES)
        if self.chance(0.3):
            self.name = f"case{self.index}"
        self.priority = int(self.pick([0, 0, 0, 1, -3, 7]))
        # the process set: the global one mostly
        self.pset = self.pick(self.sets) if self.chance(0.25) and self.sets else hvd.global_process_set
        self.members = list(self.pset.ranks)
        if self.mode in ("one_bad", "mismatch") and len(self.members) < 2:
            self.mode = "all_bad"
        outsiders = [r for r in range(n) if r not in self.members]
        if self.mode == "outsider" and not outsiders:
            self.mode = "valid"
        self.odd = self.pick(self.members) if len(self.members) > 1 else self.members[0]
        self.outsider = self.pick(outsiders) if outsiders else None
        if self.kind in ("broadcast_object", "allgather_object", "process_set") and self.mode == "outsider":
            self.mode = "valid"
        self.pset_index = self.members.index(self.rank) if self.rank in self.members else None
        getattr(self, "_draw_" + self.kind.rstrip("_").replace("grouped_", ""))()
        self.describe()

    def describe(self):
        where = "" if self.pset is hvd.global_process_set else f" on ranks {self.members}"
        name = "auto" if self.name is None else repr(self.name if len(self.name) < 20 else self.name[:17] + "...")
        self.text = (f"case {self.index}: {self.kind}{where} name={name} {self.mode}"
                     + (f" (odd rank {self.odd})" if self.mode in ("one_bad", "mismatch") else "")
                     + (f" (outsider rank {self.outsider})" if self.mode == "outsider" else "")
                     + (": " + "; ".join(self.notes) if self.notes else ""))

    # --- who does what
    def role(self, rank):
        """'member', 'odd' (the member that differs) or 'outsider' / 'idle' for ranks outside the set."""
        if rank in self.members:
            return "odd" if self.mode in ("one_bad", "mismatch") and rank == self.odd else "member"
        return "outsider" if self.mode == "outsider" and rank == self.outsider else "idle"

    @property
    def expect(self):
        role = self.role(self.rank)
        if role == "idle":
            return "skip"
        if role == "outsider" or self.mode in ("all_bad", "one_bad", "mismatch"):
            return "refuse"
        return "work"

    @property
    def me_odd(self):
        return self.role(self.rank) == "odd"

    def names_the_call(self):
        """What every rank's message names: the user's name, or an auto name's 'noname'."""
        if self.name is None:
            return ["noname"] if self.kind not in ("broadcast_object", "allgather_object") else []
        return [self.name] if self.name else []

    # --- bad arguments, the same list for every collective where it applies
    def bad_argument(self, fields):
        """A bad argument for one of `fields` (of this kind's call): (field, value, parts)."""
        n = self.size
        choices = []
        if "tensor" in fields:
            choices += [("tensor", np.ones(3, dtype=np.float32), ["NDArray"]),
                        ("tensor", np.arange(8.0)[::2], ["NDArray"]),
                        ("tensor", [1.0, 2.0], ["NDArray"]),
                        ("tensor", None, ["NDArray"]),
                        ("tensor", "bool", ["bool"]),
                        ("tensor", "gpu", ["gpu", "GPU", "CUDA"])]
            if min(getattr(self, "rows", [1])) > 0:  # a sparse array has rows
                choices += [("tensor", "sparse", ["sparse"])]
        if "op" in fields:
            choices += [("op", 7, ["op"]), ("op", "Sum", ["op"]), ("op", hvd.Adasum, ["Adasum"]),
                        ("average", True, ["average"])]
        if "scale" in fields:
            choices += [("prescale_factor", "2", ["prescale_factor"]), ("postscale_factor", None, ["postscale_factor"]),
                        ("prescale_factor", True, ["prescale_factor"]), ("postscale_factor", 1j, ["postscale_factor"])]
        if "root" in fields:
            choices += [("root_rank", -1, ["root"]), ("root_rank", n, ["root"]), ("root_rank", 0.0, ["root"]),
                        ("root_rank", "0", ["root"]), ("root_rank", None, ["root"])]
        if "splits" in fields:
            choices += [("splits", [1] * (n + 1), ["splits"]), ("splits", "negative", ["splits"]),
                        ("splits", "wrong_sum", ["splits"]), ("splits", [1.0] * n, ["splits"]),
                        ("splits", np.ones(n, dtype=np.float32), ["splits"])]
        if "rs_op" in fields:
            choices += [("op", hvd.Min, ["reducescatter"]), ("op", hvd.Product, ["reducescatter"]),
                        ("op", 9, ["reducescatter"])]
        if "scalar" in fields:
            choices += [("tensor", "scalar", ["dimension"])]
        if "dup" in fields:
            choices += [("tensor", "duplicate", ["twice"])]
        choices += [("priority", 2 ** 40, ["priority"]), ("priority", 1.5, ["priority"]),
                    ("priority", "high", ["priority"])]
        if self.mode == "all_bad":  # wrong on every rank only: a rank alone with these stalls by design
            choices += [("name", 12, ["name"]), ("name", b"w", ["name"]),
                        ("process_set", "global", ["process_set"]),
                        ("process_set", "unregistered", ["not registered"])]
        return choices[self.rng.randint(len(choices))]

    # --- the collectives
    def _scale_and_op(self, ops):
        self.op = self.pick(ops)
        self.pre = float(self.pick(FACTORS))
        self.post = float(self.pick(FACTORS))
        self.use_average_kwarg = self.op in ("Average", "Sum") and self.chance(0.05)

    def _draw_allreduce(self):
        grouped = self.kind.startswith("grouped")
        count = int(self.rng.randint(1, 5)) if grouped else 1
        if grouped and self.chance(0.05):
            count = 0
        self.tensors = [self.tensor(i) for i in range(count)]
        self._scale_and_op(list(OPS))
        self.in_place = self.kind.endswith("_")
        self.mixed_in_place = self.chance(0.1)  # the odd rank calls the other form: both are allreduce
        self.container = self.pick(["list", "list", "tuple", "generator"]) if grouped else None
        if self.container == "generator":
            self.mixed_in_place = False
            if self.in_place:
                self.container = "list"
        self.bad = None
        fields = ["tensor", "op", "scale"] + (["dup"] if self.in_place and count >= 1 and grouped else [])
        self._draw_mode(fields, ["shape", "dtype", "op", "prescale", "postscale", "count", "kind"], count)

    def _draw_allgather(self):
        grouped = self.kind.startswith("grouped")
        count = int(self.rng.randint(1, 4)) if grouped else 1
        self.tensors = [self.tensor(i) for i in range(count)]
        # each member's first dimension
        self.firsts = [[int(self.rng.randint(0, 4)) for _ in range(self.size)] for _ in range(count)]
        self.container = self.pick(["list", "tuple"]) if grouped else None
        self._draw_mode(["tensor", "scalar"], ["trailing", "ndim", "dtype", "count", "kind"], count)

    def _draw_broadcast(self):
        self.tensors = [self.tensor(0)]
        self.root = int(self.pick(self.members))
        self.root_type = self.pick([int, int, np.int64])
        self.in_place = self.kind.endswith("_")
        self.mixed_in_place = self.chance(0.1)
        self._draw_mode(["tensor", "root"], ["root", "shape", "dtype", "kind"], 1)

    def _draw_alltoall(self):
        n = len(self.members)
        t = self.tensor(0)
        if not t.shape:
            t.shape = (2,)
        self.tensors = [t]
        self.splits_form = self.pick(["none", "list", "tuple", "int32", "int64", "ndarray"])
        if self.splits_form == "none":
            self.rows = [n * int(self.rng.randint(0, 3)) for _ in range(self.size)]
            self.splits = [[r // n] * n for r in self.rows]
        else:
            self.splits = [[int(v) for v in self.rng.randint(0, 3, size=n)] for _ in range(self.size)]
            self.rows = [sum(s) for s in self.splits]
        self._draw_mode(["tensor", "splits", "scalar"], ["trailing", "dtype", "kind"], 1)

    def _draw_reducescatter(self):
        grouped = self.kind.startswith("grouped")
        count = int(self.rng.randint(1, 4)) if grouped else 1
        self.tensors = [self.tensor(i) for i in range(count)]
        self._scale_and_op(["Average", "Sum"])
        self.use_average_kwarg = False
        self.container = self.pick(["list", "tuple"]) if grouped else None
        self._draw_mode(["tensor", "rs_op", "scale", "scalar"],
                        ["shape", "dtype", "op", "prescale", "postscale", "count", "kind"], count)

    def _draw_broadcast_object(self):
        self.root = int(self.pick(range(self.size)))
        self.obj = self.pick([{"epoch": self.index, "lr": 0.1}, list(range(50)), "text " * 20, None,
                              np.arange(6).reshape(2, 3), (1, 2.5, "x"), b"\x00\xff" * 300, lambda v: v + 1])
        self.tensors = []
        self.pset = hvd.global_process_set
        self.members = list(range(self.size))
        if self.mode in ("one_bad", "all_bad"):
            self.mode = "one_bad" if self.mode == "one_bad" else "all_bad"
            self.odd = self.root  # only the root pickles
            self.bad = ("object", "unpicklable", ["lock"])
            if self.mode == "all_bad":
                self.bad = self.pick([("root_rank", self.size, ["root"]), ("root_rank", -1, ["root"]),
                                      ("name", 12, ["name"]), ("object", "unpicklable", ["lock"])])
                if self.bad[0] == "object":  # only the root pickles, so only it refuses; the others then
                    self.mode = "one_bad"    # wait for its object: the one_bad contract
        elif self.mode == "mismatch":
            self.odd = int(self.pick([r for r in range(self.size) if r != self.root]))
            self.bad = ("root", None, ["root"])
        else:
            self.mode = "valid"
            self.bad = None
        self.notes.append(f"root {self.root}, {type(self.obj).__name__}")
        if self.bad:
            self.notes.append(f"{self.bad[0]}={self.bad[1]!r}")

    def _draw_allgather_object(self):
        self.tensors = []
        self.pset = self.pset if self.chance(0.5) else hvd.global_process_set
        self.members = list(self.pset.ranks)
        self.pset_index = self.members.index(self.rank) if self.rank in self.members else None
        self.objs = [self.pick([r, f"rank{r}", {"r": r}, [r] * r, None, np.arange(r + 1)]) for r in range(self.size)]
        self.bad = None
        if self.mode in ("one_bad", "all_bad") and len(self.members) >= 2:
            self.mode = "one_bad"
            self.odd = self.pick(self.members)
            self.bad = ("object", "unpicklable", ["lock"])
            self.notes.append("an unpicklable object")
        else:
            self.mode = "valid"

    def _draw_process_set(self):
        """add_process_set of a set of ranks, an allreduce on it, remove_process_set."""
        self.tensors = [self.tensor(0, dtype=self.pick(FLOATS))]
        registered = [s.ranks for s in self.sets]
        free = [s for s in proper_subsets(self.size) if s not in registered]
        self.new_ranks = self.pick(free) if free else None
        self.bad = None
        if self.new_ranks is None:
            self.mode = "all_bad"
        if self.mode == "mismatch":
            self.odd = self.pick(range(self.size))
            self.other_ranks = self.pick([s for s in proper_subsets(self.size) if s != self.new_ranks])
            self.notes.append(f"ranks {self.new_ranks}, the odd rank's {self.other_ranks}")
        elif self.mode == "all_bad":
            self.bad = self.pick([("ranks", [0, 0], ["distinct"]), ("ranks", [self.size], ["in [0"]),
                                  ("ranks", "x", ["integer"]), ("ranks", list(range(self.size)), ["already exists"])]
                                 + [("ranks", s, ["already exists"]) for s in registered[:1]])
            self.notes.append(f"ranks={self.bad[1]!r}")
        else:
            self.mode = "valid"
        self.pset = hvd.global_process_set
        self.members = list(range(self.size))

    def _draw_mode(self, bad_fields, mismatch_fields, count):
        self.bad = None
        self.mismatch = None
        if count == 0 and self.mode == "one_bad":  # an empty call submits nothing: the others' cannot fail
            self.mode = "all_bad"
        if self.mode in ("all_bad", "one_bad"):
            self.bad = self.bad_argument(bad_fields)
            if self.bad[0] == "tensor" and count == 0:
                self.mode = "valid"
                self.bad = None
            else:
                self.notes.append(f"{self.bad[0]}={self.bad[1]!r:.40}")
        elif self.mode == "mismatch":
            fields = list(mismatch_fields)
            if count == 0:
                fields = []
            if not self.name:  # auto names (and the empty one) of different kinds never meet
                fields = [f for f in fields if f != "kind"]
            if not fields:
                self.mode = "valid"
            else:
                self.mismatch = self.pick(fields)
                self.notes.append(f"odd {self.mismatch}")
        if self.mismatch == "kind":
            self.other_kind = self.pick([k for k in ("allreduce", "broadcast", "allgather", "alltoall", "reducescatter",
                                                     "grouped_allreduce") if not self.kind.startswith(k)])
            self.notes.append(f"-> {self.other_kind}")
        if self.mismatch == "dtype":
            self.other_dtype = self.pick([d for d in DTYPES if d != self.tensors[-1].dtype])
        if self.mismatch == "op":
            ops = ["Average", "Sum"] if self.kind.endswith("reducescatter") else list(OPS)
            self.other_op = self.pick([o for o in ops if o != self.op])
        if self.mismatch in ("prescale", "postscale"):
            self.other_factor = float(self.pick([3.0, 0.125, -2.0]))
        if self.mismatch == "count":
            self.other_count = count + 1 if count < 2 or self.chance(0.5) else count - 1
        if self.mismatch == "root":
            self.other_root = self.pick([r for r in self.members if r != self.root])
        for t in self.tensors:
            self.notes.append(f"{t.dtype}{list(t.shape)}@{t.ctx}{'/' + t.form if t.form != 'plain' else ''}")
        if getattr(self, "op", None) is not None and self.kind in ("allreduce", "allreduce_", "grouped_allreduce",
                                                                    "grouped_allreduce_", "reducescatter",
                                                                    "grouped_reducescatter"):
            self.notes.append(f"op {self.op} pre {self.pre:.3g} post {self.post:.3g}")
        if self.kind in ("broadcast", "broadcast_"):
            self.notes.append(f"root {self.root}")
        if self.kind == "alltoall":
            self.notes.append(f"splits {self.splits_form} {self.splits}")
