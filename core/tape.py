"""The tape: an immutable Wengert list of primitive equations, and its builder.

A program is *traced*: the lowering runs every operation once on concrete
values and records it as an :class:`Equation` ``out = prim(args..., params)``.
Derivative rules are traced the same way, so a backward or tangent pass is
itself a list of equations that can be printed, evaluated with a leading batch
axis, or differentiated again.

Every value has a *logical* shape (the one the program sees).  Primitive
parameters are normalised at trace time so that they address axes from the
end (``axis=-1``, ``x[..., i]``), which makes every equation accept any number
of extra leading batch axes: :func:`eval_equations` runs a recorded pass on a
whole batch of seeds at once.
"""
from __future__ import annotations

import contextlib
import math
import sys
import weakref
from collections import deque
from typing import Any, NamedTuple

import numpy as np

from .alloc import keep_freed_memory
from .errors import GradcalcError, LimitError, Pos, ShapeError, ValueError_, option, to_pos

DEFAULT_MAX_ELEMENTS = 10**8
#: Whether sys.getrefcount counts every reference to an object: CPython before 3.14 (where the
#: interpreter may borrow references it does not count). Where it does not, nothing is written in
#: place (see Builder.overwritable).
COUNTS_REFERENCES = sys.implementation.name == "cpython" and sys.version_info < (3, 14)
#: Primitive operations recorded plus loop iterations a run may take (SPEC §7).
DEFAULT_MAX_STEPS = 10**7
MAX_NDIM = 32  # NumPy's own limit for several of its operations


F64 = np.dtype(np.float64)
F64_SCALAR = np.float64  # the class of a value with no axes on the tape
NO_PARAMS: dict = {}  # the parameters of every equation that has none (never mutated)


def by_row(value: np.ndarray) -> np.ndarray:
    """A batch (its first axis) as rows of its flattened items: ``reshape(len, -1)`` with the
    row length spelt out, which -1 leaves ambiguous when the batch has no rows."""
    return value.reshape(len(value), math.prod(value.shape[1:]))


#: The most elements BLAS's dot sums here.  A dot of a few hundred elements costs a third of
#: np.add.reduce's call; but OpenBLAS runs a longer one on its thread pool, whose threads, asleep
#: after a pause (a loop's Python between two looks), wait a scheduler tick to wake on a busy
#: machine: under load a dot of 30,000 elements took 11-12 ms after a 0.2 ms pause, np.add.reduce
#: 12 us (np.einsum's single-threaded loop 22 us).  Below this, OpenBLAS's dot runs on one thread.
SERIAL_DOT = 8192


def elements_spanned(shape) -> int:
    """The elements a shape counts against --max-elements: zero-length axes count as 1 (an empty
    array of shape (10^5, 10^5, 0) holds nothing, but its nested-list form would not end).  Exact
    integers: a shape may be an .npy header's, beyond int64."""
    size = 1
    for d in shape:
        size *= max(int(d), 1)
    return size


def squared_norm(v: np.ndarray) -> float:
    """The sum of the squares of v's elements (a float64 array): inf or nan when an element is,
    or when the sum overflows.  Never on BLAS's thread pool (see SERIAL_DOT)."""
    flat = v.reshape(-1)
    return float(flat.dot(flat) if flat.size <= SERIAL_DOT else np.einsum("i,i->", flat, flat))


def has_nan(x) -> bool:
    """Whether an array (or a 0-d one) holds a nan."""
    return bool(x != x) if x.ndim == 0 else bool(np.isnan(x).any())


def distinct_index(idx: tuple) -> bool:
    """Whether an index selects no element twice and NumPy lays its selection out in the order
    of its axes: integers and slices (basic indexing), or else integer arrays that stand
    together with the integers among them (advanced indices, which NumPy then leaves in place)
    and select distinct elements: the gathers x[[i, i + 1]] and take(x, i), a mask's nonzero
    arrays.  (An index's arrays are normalised: non-negative, read-only.)"""
    advanced = []
    for k, i in enumerate(idx):
        t = type(i)
        if t is np.ndarray:
            if i.dtype.kind not in "iu":
                return False
        elif t is not int and t is not slice:
            return False
        if t is not slice:
            advanced.append(k)
    if not advanced or all(type(idx[k]) is int for k in advanced):
        return True  # (integers and slices alone)
    if advanced[-1] - advanced[0] + 1 != len(advanced):
        return False  # (apart: NumPy would move their axes first)
    parts = np.broadcast_arrays(*(np.asarray(idx[k]) for k in advanced))
    if parts[0].size <= 1:
        return True
    columns = [p.reshape(-1) for p in parts]
    if _ascending(columns):  # (a mask's nonzero arrays: in order, so distinct, in O(n))
        return True
    chosen = np.stack(columns, axis=1)
    return len(np.unique(chosen, axis=0)) == len(chosen)


def _ascending(columns: list) -> bool:
    """Whether the tuples (columns[0][i], columns[1][i], ...) strictly ascend in i."""
    later = np.zeros(len(columns[0]) - 1, dtype=bool)
    tied = np.ones(len(columns[0]) - 1, dtype=bool)
    for c in columns:
        later |= tied & (c[1:] > c[:-1])
        tied &= c[1:] == c[:-1]
    return bool(later.all())


def all_finite(value) -> bool:
    """True when no element is nan or inf.

    A sum is one pass with no temporary array, and nan or inf in means nan or inf out; only
    when the sum is not finite (or overflowed) is each element looked at.  An array of up to
    SERIAL_DOT elements is summed as its dot product with itself (a sum of squares: nan and
    inf carry through it too), which costs a third of np.add.reduce's call on a vector of a
    few hundred elements; a larger one by np.add.reduce, on this thread (see SERIAL_DOT).
    """
    dtype = value.dtype
    if dtype.kind == "f":
        nd = value.ndim
        if nd == 0:
            return math.isfinite(value)
        if dtype is F64 and value.size <= SERIAL_DOT and (nd == 1 or value.flags.c_contiguous):
            flat = value if nd == 1 else value.reshape(-1)  # (a vector of any strides: dot reads them)
            total = flat.dot(flat)
        else:
            total = np.add.reduce(value, axis=None)
        if math.isfinite(total):
            return True
    return bool(np.isfinite(value).all())


def _scalar_or_array(value):
    """A float64 value as the tape keeps it: a NumPy scalar when it has no axes (arithmetic
    on np.float64 costs a tenth of the same ufunc on a 0-d array, with the same result),
    an array otherwise."""
    value = np.asarray(value)
    if value.dtype.kind != "c" and value.dtype is not F64:
        value = value.astype(np.float64)
    return value[()] if value.ndim == 0 and value.dtype is F64 else value


class Equation(NamedTuple):
    out: int
    prim: Any  # primitives.Primitive
    args: tuple  # of var ids
    params: dict
    loc: int | Pos | None  # where in the source: a location (see errors.to_loc)

    @property
    def pos(self) -> Pos | None:
        return to_pos(self.loc)


#: Parameters an equation holds for the engine alone (an operand's shape, the ranks that line
#: batched operands up), which printed equations leave out.
ENGINE_PARAMS = frozenset(("xshape", "nd", "ond"))


def equation_rhs(op: str, args=(), params=None, operand: str = "") -> str:
    """The right-hand side of an equation as gradcalc prints it (the tape, ``graph``):
    ``mul(v1, v2)``, ``sum(v3, axes=(-1,), keepdims=False)``; ``input x`` for an input and
    ``const 2`` for a constant, whose name or value text is ``operand`` (kept on one line).
    ``args`` are the operands' names; parameters in ENGINE_PARAMS are left out."""
    if op == "input" or op == "const":
        return f"{op} {operand}".replace("\n", " ")
    shown = params_text(params)
    return f"{op}({', '.join(args)}{', ' + shown if shown else ''})"


def params_text(params) -> str:
    """An equation's parameters as printed: ``axes=(-1,), keepdims=False`` (none in ENGINE_PARAMS)."""
    return ", ".join(f"{k}={param_text(v)}" for k, v in (params or {}).items() if k not in ENGINE_PARAMS)


def param_text(v) -> str:
    """One parameter as printed: a tuple (or the list JSON makes of it) as ``(a, b)`` or
    ``(a,)``, a slice as ``start:stop`` or ``start:stop:step``, anything else as str() does."""
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(param_text(i) for i in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, slice):
        return slice_text(v)
    return str(v)


def slice_text(v: slice) -> str:
    """A slice as a program writes it: ``1:``, ``:-1``, ``::2``."""
    return (f"{'' if v.start is None else v.start}:{'' if v.stop is None else v.stop}"
            + ("" if v.step in (None, 1) else f":{v.step}"))


def _value_text(value) -> str:
    """A constant's value for a printed tape: 6 significant digits, long arrays elided."""
    text = np.array2string(np.asarray(value), separator=", ", threshold=8, edgeitems=3,
                           formatter={"float_kind": lambda x: f"{x:.6g}"})
    return " ".join(text.split())


class Tape(NamedTuple):
    """A traced program: equations in order, its constants, inputs and names.

    ``inputs`` and ``names`` map program names to variable ids; ``shapes``
    gives every variable's logical shape; ``output`` is the default output.
    """

    equations: tuple
    consts: dict
    inputs: dict  # name -> var, in input order
    names: dict  # every named value -> var, in definition order
    shapes: dict  # var -> shape
    output: str | None
    positions: dict  # name -> location of its definition (errors.to_pos makes it a Pos)
    guards: tuple = ()  # of Guard: the decisions the run took (its path)

    def __str__(self) -> str:
        """One line per equation, in the manner of JAX's autodidax: the inputs
        (``v0 = input x``), the constants (``v2 = const 2``), the equations in order
        (``v3 = mul(v0, v2)``), then the output (``output y = v3``)."""
        lines = [f"v{var} = {equation_rhs('input', operand=name)}" for name, var in self.inputs.items()]
        lines += [f"v{var} = {equation_rhs('const', operand=_value_text(value))}"
                  for var, value in self.consts.items()]
        lines += [f"v{eq.out} = {equation_rhs(eq.prim.name, [f'v{a}' for a in eq.args], eq.params)}"
                  for eq in self.equations]
        if self.output is not None:
            lines.append(f"output {self.output} = v{self.names[self.output]}")
        return "\n".join(lines)


_new_equation = tuple.__new__  # Equation(...) without the Python-level __new__
_new_object = object.__new__
_isfinite = math.isfinite


class Guard(NamedTuple):
    """A decision the program took while it was traced, which fixes the path recorded:
    variable ``var`` had the value ``expected`` (a condition's truth, or the integer, the
    integer array or the mask an index, a bound or a shape was taken from).  ``loc`` is
    where in the source (a condition's first token); ``what`` says which kind ("if",
    "while", "conditional", "index", "range"...).  On another point the tape holds only
    where every guard's variable has the same value."""

    var: int
    expected: Any
    loc: int | None
    what: str


class Warning_(NamedTuple):
    message: str
    pos: Pos | None


class Tracer:
    """A variable of a :class:`Builder`.

    Its arithmetic operators (``+ - * / ** @``, unary ``-``) record the primitives they
    stand for, so that rules read like the math they implement.  The primitives module
    defines those primitives on top of this one, and gives the operators to this class
    once, as it loads (see ``primitives._tracer_arithmetic``).
    """

    __slots__ = ("builder", "var", "__weakref__")  # (weak references: see _Lifetimes)
    __array_ufunc__ = None  # numpy defers to our reflected operators

    def __init__(self, builder: "Builder", var: int):
        self.builder = builder
        self.var = var

    @property
    def value(self):
        return self.builder.values[self.var]

    @property
    def shape(self) -> tuple:
        return self.builder.shapes[self.var]

    @property
    def ndim(self) -> int:
        return len(self.builder.shapes[self.var])

    def __repr__(self):
        return f"Tracer(v{self.var}, shape={self.shape})"


def broadcast_shapes(*shapes) -> tuple:
    """NumPy's broadcasting of shapes, on tuples (np.broadcast_shapes builds arrays to
    find out, which costs more than the primitive it checks on small values)."""
    if len(shapes) == 2:
        a, b = shapes
        if a == b or not b:
            return a
        if not a:
            return b
        if len(a) == len(b):  # (a bias (n, 1) beside (n, m): axis by axis, no alignment)
            out = []
            for p, q in zip(a, b):
                if p == q or q == 1:
                    out.append(p)
                elif p == 1:
                    out.append(q)
                else:
                    raise ValueError(f"shape mismatch: {shapes} do not broadcast")
            return tuple(out)
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s, nd - len(s)):
            if d != 1:
                if out[i] == 1:
                    out[i] = d
                elif out[i] != d:
                    raise ValueError(f"shape mismatch: {shapes} do not broadcast")
    return tuple(out)


class _Dropped:
    """The equations of a builder that keeps no tape: counted (``--max-steps`` counts the
    operations a run records), never kept."""

    __slots__ = ("count",)

    def __init__(self):
        self.count = 0

    def append(self, equation) -> None:
        self.count += 1

    def __len__(self) -> int:
        return self.count


#: In a primitive's ``reads``: its output (operands are named by their position).
OUT = -1
#: The fewest elements of an array that a recording builder frees while it records (see
#: Builder.release_unread): below, the watch costs more than the memory is worth (a grad of a
#: loop over 3-element vectors took 5.5% more instructions with every array watched; with this,
#: 0.997x the time before release_unread, side by side).
WATCHED_ELEMENTS = 1024


class _Watch(weakref.ref):
    """A weak reference to the tracer of a value a builder may free (see :class:`_Lifetimes`)."""

    __slots__ = ("var",)


class _Lifetimes:
    """How long a builder keeps the values it may free: while their tracer lives.  Two uses:

    - A builder that keeps no tape (eval, ``tapeless=True``) frees every value when its tracer goes,
      and forgets its variable: a long loop runs in bounded memory.  When the run ends,
      :meth:`Builder.stop_freeing` keeps the values of the program's names alone.
    - A recording builder whose tape only a first-order eager pass reads (grad, vjp, jvp:
      ``tapeless=False``, :meth:`Builder.release_unread`) frees, while it records, an array that no
      recorded equation's rules read (``Primitive.reads``, see :meth:`note`) when its tracer
      goes: nothing can read it again.  Its value becomes None; its shape stays.  A 200-step RNN
      then holds what its backward pass reads, 40 KB a step, instead of every intermediate.

    A tracer made of a variable by a derivative pass (``Tracer(builder, var)``) is not watched and
    keeps nothing alive (see :meth:`owns`); inside :meth:`Builder.recording` (a derivative the
    program takes itself, whose passes read the call's values), nothing is freed until the
    outermost block ends.  The watches hold this object through a weak reference, so that it
    forms no reference cycle (gradcalc pauses the cycle collector while it runs)."""

    __slots__ = ("values", "shapes", "tapeless", "watched", "held", "dead", "gone", "__weakref__")

    def __init__(self, values: dict, shapes: dict, tapeless: bool):
        self.values, self.shapes, self.tapeless = values, shapes, tapeless
        self.watched: dict[int, _Watch] = {}  # var -> the watch on the tracer that keeps its value
        self.held = 0  # recording blocks open
        self.dead: list[_Watch] = []  # the watches whose tracer went while held
        lifetimes = weakref.ref(self)

        def gone(watch: _Watch) -> None:
            """The watched tracer went: free its variable's value (unless a rule has read it since),
            or, inside a recording block, once the outermost one ends (see release_dead).  The
            watch's own callback, written out: it runs once for every value of an eval."""
            this = lifetimes()
            if this is None:
                return
            if this.held:
                this.dead.append(watch)
            else:
                this.release(watch.var)
        self.gone = gone

    def release(self, var: int) -> None:
        """Free var's value now, if it is watched (and forget var, on a builder that keeps no tape:
        nothing else refers to it)."""
        if self.watched.pop(var, None) is not None:
            if self.tapeless:
                self.values.pop(var, None)
                self.shapes.pop(var, None)
            else:
                self.values[var] = None

    def tracer(self, builder: "Builder", var: int) -> "Tracer":
        """A new, watched tracer of var (a builder that keeps no tape makes every tracer so)."""
        t = _new_object(Tracer)
        t.builder = builder
        t.var = var
        w = self.watched[var] = _Watch(t, self.gone)  # (watch(), written out: once per value of an eval)
        w.var = var
        return t

    def watch(self, var: int, t: "Tracer") -> None:
        w = self.watched[var] = _Watch(t, self.gone)
        w.var = var

    def note(self, prim, ids: tuple, var: int, t: "Tracer", array: bool) -> None:
        """``tapeless=False``: the equation var = prim(*ids) was recorded; the operands its rules read
        are kept from now on, and var is watched if it is an array they do not read."""
        if not prim.differentiable:
            return  # (no rule of it runs, so it reads nothing; its output, a mask, is left unwatched: kept)
        watched = self.watched
        reads = prim.reads
        if reads is None:  # (its rules may read any operand, and its output)
            for v in ids:
                watched.pop(v, None)
            return
        for k in reads:
            if k != OUT:
                watched.pop(ids[k], None)
        if array and OUT not in reads:
            self.watch(var, t)

    def owns(self, t: "Tracer") -> bool:
        """Whether t is the tracer that keeps its value alive."""
        watch = self.watched.get(t.var)
        return watch is not None and watch() is t

    def release_dead(self) -> None:
        """The end of the outermost recording block: release the variables whose tracers went."""
        dead, self.dead = self.dead, []
        for watch in dead:
            self.gone(watch)

    def stop(self) -> None:
        """Free nothing more (the watches go before their tracers: no callback runs)."""
        self.watched.clear()
        self.dead.clear()


_IMPL_ERRORS = (GradcalcError, np.linalg.LinAlgError, ValueError, IndexError)  # (see Builder._worded)


class Builder:
    """Records equations while computing their values on concrete inputs.

    A builder is an explicit object handed to whoever traces; there is no
    global "current tape".  ``pos`` is where in the source the next equations
    belong, for error messages and non-finite warnings: a location (an int, see
    :func:`errors.to_loc`; what the lowering sets), a Pos, or None.

    With ``record=False`` (a run whose values are all that is wanted: eval), the builder
    keeps no tape: no equation, constant or guard, and a value only as long as something
    refers to its variable, so that a long loop runs in bounded memory.  Its values,
    warnings and errors are those of a recording builder; :meth:`recording` records a
    stretch of equations where they are needed (``grad(f)(x)`` in a program).
    """

    def __init__(self, max_elements: int = DEFAULT_MAX_ELEMENTS, check_finite: bool = True,
                 record: bool = True):
        self.values: dict[int, np.ndarray] = {}
        self.shapes: dict[int, tuple] = {}
        self.record = record
        self.equations: list[Equation] = [] if record else _Dropped()
        self.dropped = 0  # equations counted beside self.equations (see recording())
        self.consts: dict[int, np.ndarray] = {}  # (none on a builder that keeps no tape: see const())
        # what frees values (see _Lifetimes): every value on a builder that keeps no tape; on a
        # recording one, nothing, or the arrays no rule reads (release_unread)
        self.lifetimes = None if record else _Lifetimes(self.values, self.shapes, tapeless=True)
        self.new_tracer = Tracer if record else self.lifetimes.tracer
        self.max_elements = max_elements
        self.check_finite = check_finite
        self.warnings: list[Warning_] = []
        self._warned: set = set()
        self.pos: int | Pos | None = None
        # location of a call -> the builtin called there, where it records several primitives
        # (mean: sum and div), so that warnings name what the program wrote
        self.labels: dict[int, str] = {}
        # the program's Source, when known: an operator is named as written there ('^', not pow_const)
        self.source = None
        # the path taken (see Guard), in the order it was taken (a builder that keeps no tape keeps none)
        self.guards: list[Guard] = [] if record else deque(maxlen=0)
        self._next = 0
        # elements of the arrays recorded so far, until a tape holds LARGE_TAPE of them (see _bind)
        self._held = 0 if record else -1
        # bytes of the arrays made so far, freed or not: when a run looks at the memory left (see
        # run.Interpreter.step)
        self.made = 0
        self._finite = None  # the variable of the last update written in place, if finite (see update)

    def release_unread(self) -> None:
        """Free, from now on while recording, the arrays of WATCHED_ELEMENTS or more that no
        derivative rule reads, once nothing refers to them (see :class:`_Lifetimes`): for a trace
        whose only readers afterwards are a first-order eager pass, backward (grad, vjp) or forward
        (jvp), and the program's names (the values their tracers hold at :meth:`stop_freeing`).  A
        traced pass over the tape, a second-order pass and anything else that reads its values
        need a builder that never released."""
        if self.record:
            self.lifetimes = _Lifetimes(self.values, self.shapes, tapeless=False)

    def stop_freeing(self, names=None) -> None:
        """Free nothing more: the end of a run.  A builder that keeps no tape keeps the values of
        ``names`` (the variables of the program's names) alone."""
        lifetimes = self.lifetimes
        if lifetimes is None:
            return
        if not self.record:
            keep = set(names or ())
            for var in [v for v in self.values if v not in keep]:
                del self.values[var], self.shapes[var]
            self.new_tracer = Tracer
        lifetimes.stop()
        self.lifetimes = None

    def operations(self) -> int:
        """The operations recorded so far, kept on the tape or not (what max_steps counts)."""
        return len(self.equations) + self.dropped

    @contextlib.contextmanager
    def recording(self):
        """Record the equations made in the block, and free no value until it ends, on a
        builder that keeps no tape (blocks nested in it record into its list); on a
        recording builder, free no value until it ends (see release_unread)."""
        lifetimes = self.lifetimes
        outermost = lifetimes is not None and not lifetimes.held
        dropping = outermost and not self.record
        if dropping:
            dropped = self.equations
            self.equations, self.dropped = [], len(dropped)
        if lifetimes is not None:
            lifetimes.held += 1
        try:
            yield
        finally:
            if lifetimes is not None:
                lifetimes.held -= 1
            if dropping:
                dropped.count += len(self.equations)
                self.equations, self.dropped = dropped, 0  # (the block's equations go, and what they held)
            if outermost:
                lifetimes.release_dead()

    def owns(self, t: "Tracer") -> bool:
        """Whether t keeps its value alive: always on a recording builder; on one that keeps
        no tape, unless a derivative pass made t of a recorded variable (inside recording())."""
        return self.record or self.lifetimes is None or self.lifetimes.owns(t)

    # -- variables ------------------------------------------------------------
    def _new(self, value) -> Tracer:
        if type(value) is F64_SCALAR:
            shape = ()  # a scalar: no rank to check
        else:
            shape = value.shape
            if not shape and value.dtype is F64:  # (a 0-d array) the scalar the tape keeps
                value = value[()]
            elif len(shape) > MAX_NDIM:
                raise ShapeError(f"a value with {value.ndim} dimensions; at most {MAX_NDIM} are supported",
                                 self.pos)
        var = self._next
        self._next = var + 1
        self.values[var] = value
        self.shapes[var] = shape
        return self.new_tracer(self, var)

    def input(self, value) -> Tracer:
        return self._new(_scalar_or_array(value))

    def const(self, value) -> Tracer:
        # (a float, as a rule's constant: the np.float64 _scalar_or_array would make, directly)
        value = F64_SCALAR(value) if type(value) is float else _scalar_or_array(value)
        t = self._new(value)
        if self.record:  # (a builder that keeps no tape keeps no constant: it would keep its value alive)
            self.consts[t.var] = value
        return t

    def check_size(self, shape, what: str | None = None) -> None:
        """Refuse, before allocating, an array with more than max_elements elements.

        Zero-length axes count as 1 here: an empty array of shape (10^5, 10^5, 0)
        holds nothing, but printing it as nested lists would not end.
        """
        size = elements_spanned(shape)
        if size > self.max_elements:
            dims = "(" + ", ".join(map(_count, shape)) + ("," if len(shape) == 1 else "") + ")"
            if what:
                message = f"{what} would have {_count(size)} elements"
            elif 0 in shape:  # empty, but its nested-list form alone would be that large
                message = f"array of shape {dims} spans {_count(size)} elements"
            else:
                message = f"array of shape {dims} has {_count(size)} elements"
            raise LimitError(f"{message}, more than {option('max_elements')}={self.max_elements}", self.pos,
                             option="max_elements",
                             hint=f"raise {option('max_elements')} if it is meant to be that large")

    # -- recording ------------------------------------------------------------
    def bind(self, prim, args: tuple, params: dict) -> Tracer:
        """Record ``prim(*args, **params)`` on tracers: compute its value, append its equation."""
        if not params:
            n = len(args)
            if n == 2:
                if prim.plain is not None:
                    return self.bind2(prim, args[0], args[1])
            elif n == 1 and prim.trivial_params:
                return self.bind1(prim, args[0])
        return self._bind(prim, args, params)

    # bind2 and bind1 are bind for the commonest calls, which the interpreter makes directly:
    # operands that are NumPy scalars (a scalar program) go without bind's branches, conversions
    # and checks of shape when the value is a scalar too; anything else takes the general code.
    # Same value, same equation.  Each writes out the recording that _bind ends with (but the
    # note to release_unread's lifetimes: a scalar is never watched, and a scalar operand is no
    # watched array): a shared helper would cost a call per operation, about a tenth of recording one.

    def bind2(self, prim, a: Tracer, b: Tracer) -> Tracer:
        """bind(prim, (a, b), NO_PARAMS) for a broadcasting primitive (one with prim.plain)."""
        values = self.values
        ids = (a.var, b.var)
        x = values[ids[0]]
        if x.__class__ is F64_SCALAR:
            y = values[ids[1]]
            if y.__class__ is F64_SCALAR:
                value = prim.plain(x, y)
                if value.__class__ is F64_SCALAR:
                    var = self._next
                    self._next = var + 1
                    values[var] = value
                    self.shapes[var] = ()
                    self.equations.append(_new_equation(Equation, (var, prim, ids, NO_PARAMS, self.pos)))
                    if not _isfinite(value) and self.check_finite:
                        self._note_nonfinite(prim, (a, b), value)
                    if self.record:  # Tracer(self, var), without a call of its __init__
                        t = _new_object(Tracer)
                        t.builder = self
                        t.var = var
                        return t
                    return self.new_tracer(self, var)
        return self._bind(prim, (a, b), NO_PARAMS)

    def bind1(self, prim, a: Tracer) -> Tracer:
        """bind(prim, (a,), NO_PARAMS) for a primitive without parameters (prim.trivial_params)."""
        x = self.values[a.var]
        if x.__class__ is F64_SCALAR:
            try:
                value = prim.impl(x)
            except Exception:  # noqa: BLE001 - the general code calls it again, and words the error
                value = None
            if value.__class__ is F64_SCALAR:
                var = self._next
                self._next = var + 1
                self.values[var] = value
                self.shapes[var] = ()
                self.equations.append(_new_equation(Equation, (var, prim, (a.var,), NO_PARAMS, self.pos)))
                if not _isfinite(value) and self.check_finite:
                    self._note_nonfinite(prim, (a,), value)
                if self.record:
                    t = _new_object(Tracer)
                    t.builder = self
                    t.var = var
                    return t
                return self.new_tracer(self, var)
        return self._bind(prim, (a,), NO_PARAMS)

    def _bind(self, prim, args: tuple, params: dict) -> Tracer:
        """bind, in general: any operands, any parameters."""
        values = self.values
        # The operands' variables, unpacked by hand for one or two (a comprehension costs more).
        n = len(args)
        if n == 2:
            ids = (args[0].var, args[1].var)
        elif n == 1:
            ids = (args[0].var,)
        else:
            ids = tuple([a.var for a in args])
        try:
            if n == 2 and prim.plain is not None and not params:
                # A broadcasting primitive (add, mul...): the general branch below, unrolled.
                x, y = values[ids[0]], values[ids[1]]
                if x.__class__ is y.__class__ is F64_SCALAR or x.shape == y.shape:
                    value = prim.plain(x, y)  # equal shapes (two scalars): nothing to align
                else:
                    params = prim.normalize([x.shape, y.shape], self, **params)
                    value = prim.impl(x, y, **params)
            elif prim.trivial_params:
                value = prim.impl(values[ids[0]]) if n == 1 else prim.impl(*[values[v] for v in ids])
            elif n == 1:  # (one operand with parameters: index, x^p, sum... without comprehensions)
                x = values[ids[0]]
                params = prim.normalize([x.shape], self, **params)
                value = prim.impl(x, **params)
            elif n == 2:  # (two with parameters or unequal shapes: matmul, a bias...: the same, unrolled)
                x, y = values[ids[0]], values[ids[1]]
                params = prim.normalize([x.shape, y.shape], self, **params)
                value = prim.impl(x, y, **params)
            else:
                xs = [values[v] for v in ids]
                params = prim.normalize([x.shape for x in xs], self, **params)
                value = prim.impl(*xs, **params)
        except _IMPL_ERRORS as err:
            raise self._worded(prim, err) from None
        scalar = value.__class__ is F64_SCALAR
        if scalar:
            shape = ()  # the usual case on a scalar program: nothing to convert or check
        else:
            if value.__class__ is not np.ndarray:
                value = _scalar_or_array(value)
            dtype = value.dtype
            if dtype is not F64 and dtype != F64 and dtype.kind != "c":
                value = value.astype(np.float64)
            shape = value.shape
            if not shape and value.dtype is F64:  # (a 0-d array: x[..., i] of a vector) the scalar
                value = value[()]  # the tape keeps, on which the scalar code runs
                scalar = True
            elif len(shape) > MAX_NDIM:
                raise ShapeError(f"'{self.op_name(prim, self.pos)}' would make a value with {value.ndim} "
                                 f"dimensions; at most {MAX_NDIM} are supported", self.pos)
            self.made += value.nbytes
            if self._held >= 0:
                self._held += value.size
                if self._held >= LARGE_TAPE:  # (once: the allocator is set for the process)
                    self._held = -1
                    keep_freed_memory()
        var = self._next
        self._next = var + 1
        values[var] = value
        self.shapes[var] = shape
        self.equations.append(_new_equation(Equation, (var, prim, ids, params or NO_PARAMS, self.pos)))
        # A look for nan and inf, unless prim keeps finite real values finite: then any it
        # could find came with an operand, and only the first to produce one is noted.
        if self.check_finite and not (
                math.isfinite(value) if scalar else (prim.keeps_finite and dtype is F64) or all_finite(value)):
            self._note_nonfinite(prim, args, value)
        if self.record:  # Tracer(self, var), without a call of its __init__ (as in bind2)
            t = _new_object(Tracer)
            t.builder = self
            t.var = var
            lifetimes = self.lifetimes
            if lifetimes is not None:  # (release_unread: an array large enough is watched)
                big = not scalar and value.size >= WATCHED_ELEMENTS
                if big or lifetimes.watched:
                    lifetimes.note(prim, ids, var, t, big)
            return t
        return self.new_tracer(self, var)

    def update(self, prim, x: Tracer, v: Tracer, params: dict) -> Tracer:
        """bind(prim, (x, v), params) for an index update (``x[i] = v``: a primitive with
        ``write_into``) whose x the caller holds alone: written into x's array instead of a copy
        of it where that array is x's alone and freed with it (see overwritable), and x's variable
        released at once, its value gone (nothing reads it again).  The same value, equation and
        warnings, and a look for nan and inf at the written block alone: a loop that writes each
        element of an n-element array costs O(n), not n copies and n looks at the whole."""
        values = self.values
        vv = values[v.var]
        if vv.dtype is not F64 or not self.overwritable(x.var):  # (before a local refers to x's array)
            return self._bind(prim, (x, v), params)
        xv = values[x.var]
        try:
            params = prim.normalize([xv.shape, vv.shape], self, **params)
            value = prim.write_into(xv, vv, **params)
        except _IMPL_ERRORS as err:
            raise self._worded(prim, err) from None
        self.lifetimes.release(x.var)  # (its array is the new value now)
        ids = (x.var, v.var)
        var = self._next
        self._next = var + 1
        values[var] = value
        self.shapes[var] = value.shape
        self.equations.append(_new_equation(Equation, (var, prim, ids, params, self.pos)))
        if self.check_finite:  # x's array was finite: only the block written can hold nan or inf,
            if all_finite(value[(Ellipsis,) + params["idx"]]):  # and only an addition of finite
                self._finite = var  # operands makes it so (what _note_nonfinite warns of)
            elif all_finite(vv):
                self.note_nonfinite(f"'{self.op_name(prim, self.pos)}'", value)
        if self.record:
            t = _new_object(Tracer)
            t.builder = self
            t.var = var
            self.lifetimes.note(prim, ids, var, t, True)
            return t
        return self.new_tracer(self, var)

    def _worded(self, prim, err: Exception) -> GradcalcError:
        """An error of prim's normalize or impl as the user reads it: at the current position,
        NumPy's own words after the operation's name."""
        if isinstance(err, GradcalcError):
            if err.pos is None:
                err.pos = self.pos
            return err
        if isinstance(err, np.linalg.LinAlgError):
            return ValueError_(f"'{self.op_name(prim, self.pos)}': {str(err).lower()}", self.pos)
        return ShapeError(f"'{self.op_name(prim, self.pos)}': {err}", self.pos)

    def overwritable(self, var: int) -> bool:
        """Whether var's array may be written into: its value is freed when its tracer goes (no
        recorded rule reads it, no recording block is open), nothing else refers to the array (no
        view of it, no other variable: CPython's reference count, which counts the values dict and
        getrefcount's own argument), it is a writable float64 array that owns its memory (no view
        of another's) in C order (the copy's: a sum of the result adds in the same order), and it
        holds no nan or inf (so that the update's warnings are those of the copy it replaces)."""
        lifetimes = self.lifetimes
        if lifetimes is None or lifetimes.held or var not in lifetimes.watched or not COUNTS_REFERENCES:
            return False
        if sys.getrefcount(self.values[var]) != 2:  # (the subscript's reference, not a local's)
            return False
        x = self.values[var]
        flags = x.flags
        return x.__class__ is np.ndarray and x.base is None and x.dtype is F64 and flags.writeable \
            and flags.c_contiguous and (var == self._finite or all_finite(x))

    def op_name(self, prim, loc) -> str:
        """An operation as messages name it: the builtin the program called at loc (mean), the
        operator written there ('/', '**'), or the primitive (sin)."""
        label = self.labels.get(loc)
        if label is None and self.source is not None:
            label = self.source.operator_at(loc)
        return label or prim.name

    def _note_nonfinite(self, prim, args, value):
        """Warn that prim made value's nan or inf: the first to produce it (its operands are
        finite) or, elementwise, where the operands' elements are finite (log([nan, -1]))."""
        operands = [self.values[a.var] for a in args]
        if value.__class__ is F64_SCALAR and all(x.__class__ is F64_SCALAR for x in operands):
            # (the scalar case of the rules below, without arrays: a loop on an inf, y = y * 2,
            # spent half its time here)
            if all(map(_isfinite, operands)):
                self.note_nonfinite(f"'{self.op_name(prim, self.pos)}'", value)
            return
        if all(map(all_finite, operands)):
            self.note_nonfinite(f"'{self.op_name(prim, self.pos)}'", value)
        elif prim.elementwise:
            fresh = ~np.isfinite(value)
            for x in operands:
                fresh &= np.isfinite(x)
            if fresh.any():
                self.note_nonfinite(f"'{self.op_name(prim, self.pos)}'", value[fresh])

    def note_nonfinite(self, op: str, value) -> None:
        """Record a warning that op, at the current position, produced nan or inf."""
        what = "nan" if np.isnan(value).any() else ("inf" if (value == np.inf).any() else "-inf")
        self.note_warning(op, f"produced {what}")

    def note_warning(self, op: str, text: str) -> None:
        """Record a warning that op, at the current position, `text` (once per place)."""
        pos = to_pos(self.pos)
        key = (op, pos, text)
        if key in self._warned:
            return
        self._warned.add(key)
        where = f" at line {pos.line}, column {pos.col}" if pos else ""
        self.warnings.append(Warning_(f"{op}{where} {text}", pos))

    def tape(self, inputs: dict, names: dict, output: str | None, positions=None) -> Tape:
        # (not tuple() of the dropped equations: it would allocate room for each of them)
        return Tape(tuple(self.equations) if self.record else (), dict(self.consts), dict(inputs), dict(names),
                    dict(self.shapes), output, dict(positions or {}), tuple(self.guards))


def _count(n) -> str:
    """A size or dimension for a message: exact, or to 3 digits past 15 of them (arange(-1e300, 1))."""
    digits = str(int(n))
    if len(digits) <= 15:
        return digits
    return f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}".replace(".00e", "e")  # (past float's range too)


#: Elements of a batched value from which a pass keeps freed memory (see :mod:`.alloc`).
LARGE_BATCH = 1 << 14  # 128 KB: from this size glibc would mmap each array
#: Elements of the arrays a tape holds from which the allocator keeps freed memory: a run that
#: records that much makes and frees it again on every call (W8, an RNN of 200 steps, records
#: 58 MB of 32 KB arrays: 80 ms a call with fresh pages faulted in, 52-55 ms with them kept).
LARGE_TAPE = 1 << 20  # 8 MB


def eval_equations(equations, env: dict, keep=None, batch_elements: int = 0) -> dict:
    """Evaluate equations in order; env maps var -> array and is extended in place.

    Values in env may carry extra leading batch axes; every primitive accepts
    them because its parameters address axes from the end.  With ``keep`` (the
    variables wanted afterwards), each value computed here is dropped after its
    last use, so a batched pass holds only what is live (and the allocator can
    reuse the memory instead of faulting in fresh pages for every array).
    ``batch_elements`` (the size of the largest batched value) above
    :data:`LARGE_BATCH` asks the allocator to keep freed memory.
    """
    if batch_elements >= LARGE_BATCH:
        keep_freed_memory()
    free = _frees(equations, keep) if keep is not None else None
    with np.errstate(all="ignore"):
        for i, eq in enumerate(equations):
            try:
                value = None
                if free is not None and eq.prim.write_into is not None:
                    value = _write_into(eq, env, free[i])
                if value is None:
                    value = eq.prim.impl(*[env[a] for a in eq.args], **eq.params)
                env[eq.out] = value
            except np.linalg.LinAlgError as err:  # (the traced point passed: a point near it did not)
                raise ValueError_(f"'{eq.prim.name}': {str(err).lower()} at a point near the one given",
                                  eq.loc, hint="finite differences and plots evaluate the program at nearby "
                                  "points too; move the point away from where the matrix is singular") from None
            except ValueError_ as err:  # (cholesky of a matrix a step made indefinite: as above)
                raise ValueError_(f"{err.message} at a point near the one given", eq.loc,
                                  hint="finite differences and plots evaluate the program at nearby points "
                                  "too; move the point away from where it fails") from None
            if free is not None:
                for v in free[i]:
                    del env[v]
    return env


def _write_into(eq, env: dict, dying: list):
    """eq's value (an index update, ``x[idx] = v``: a primitive with ``write_into``) written into
    x's array, where the pass owns it and it dies here, or None (impl's copy then).  x must be a
    value this pass made (not an input, a constant or a traced value: env holds those for its
    caller too), whose last use this is (dying: eq's frees), referred to by env alone (no view
    of it, no other variable: CPython's reference count), a writable C-ordered array that owns
    its memory, with the batch axes of the result already and its dtype (impl's np.empty of the
    broadcast batch and result_type).  impl copies x and writes v at idx; this writes the same
    v, lined up as impl lines it up, at the same places: the same bits, in O(batch x |idx|)
    instead of O(batch x x.size) a step (a fill loop's batched pass over n steps was O(n^3))."""
    x_var, v_var = eq.args
    if x_var not in dying or x_var == v_var or not COUNTS_REFERENCES:  # (dying: made by this pass)
        return None
    if sys.getrefcount(env[x_var]) != 2:  # (env's reference and the argument's)
        return None
    x, v = env[x_var], env[v_var]
    if x.__class__ is not np.ndarray or x.base is not None or not x.flags.writeable \
            or not x.flags.c_contiguous:
        return None
    from .primitives import lined_up  # (primitives imports this module)
    v = np.asarray(v)
    try:
        batch, v = lined_up(x, v, **eq.params)  # (as impl lines v up)
    except ValueError:
        return None
    if batch != x.shape[:x.ndim - len(eq.params["xshape"])] or np.result_type(x, v) != x.dtype:
        return None
    return eq.prim.write_into(x, v, **eq.params)


def _frees(equations, keep) -> list:
    """For each equation, the variables it defines or reads whose last use it is."""
    produced = {eq.out for eq in equations}
    last = {}
    for i, eq in enumerate(equations):
        last[eq.out] = i
        for a in eq.args:
            last[a] = i
    free = [[] for _ in equations]
    for v, i in last.items():
        if v in produced and v not in keep:
            free[i].append(v)
    return free
