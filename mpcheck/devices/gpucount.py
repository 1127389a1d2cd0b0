"""An assumed GPU count: what `torch.cuda.device_count()` is in one interpretation.

Most real code does not name its devices: it asks `torch.cuda.device_count()` and
builds them from the answer (`[torch.device(f"cuda:{i}") for i in range(n)]`,
`devices[i % n]`, `f"cuda:{k + 1}"`). With the count unknown those values are
unknown and nothing is reported. So a file whose interpretation asks the count is
interpreted again once per assumed count (`[tool.mpcheck] gpus`, 2, 4 and 8 by
default), with `device_count()` answering that number; analysis.py keeps a finding
of those runs when the fewest GPUs the code allows give it (rules/gpucounts.py).

What this module adds to an interpretation (`Interp.gpus`, one `GpuCount`):
- the answer of `torch.cuda.device_count()` (and whether the file asked it at all:
  a file that never asks is interpreted once, so the counts cost nothing there);
- the bounds the code puts on the count: an `assert n >= 4` that fails, or an
  `if n < 2: raise ...` that is taken, refutes the count (the program stops there);
- `NonexistentDevice`: a CUDA index at or past the count (`cuda:2` with 2 GPUs), or
  a list of the devices indexed past its end (`devices[n]`), for MP009.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import libcst as cst

from mpcheck.devices.events import Fact, Recorder
from mpcheck.devices.values import UNK, Const, Devs, SeqV, Val, as_device, single

COUNT_FUNCTIONS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count"})


@dataclass(frozen=True, eq=False, kw_only=True)
class NonexistentDevice(Fact):
    """`dev` (cuda:k) is used at `node` while the assumed count is `count` (k >= count)."""

    dev: str
    count: int
    what: str  # 'placement' | 'index' (an entry past the end of a list of the devices)
    # the CUDA_VISIBLE_DEVICES the file sets, which fixes the count (visible_devices), or None
    visible: VisibleDevices | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class VisibleDevices:
    """`os.environ["CUDA_VISIBLE_DEVICES"] = "0,2"` at the top of a file: the process sees that many
    GPUs, renumbered from cuda:0, whatever the machine has."""

    node: cst.CSTNode
    value: str
    count: int


def visible_devices(module: cst.Module) -> VisibleDevices | None:
    """The one top-level assignment of a literal to `os.environ["CUDA_VISIBLE_DEVICES"]`, else None
    (none, several, a value not written out, or one that hides every GPU)."""
    found = []
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and _is_visible_key(small.targets[0].target)
                and isinstance(small.value, cst.SimpleString)
            ):
                value = str(small.value.evaluated_value)
                found.append(
                    VisibleDevices(node=small, value=value, count=len([g for g in value.split(",") if g.strip()]))
                )
    return found[0] if len(found) == 1 and found[0].count > 0 else None


def _is_visible_key(t: cst.BaseExpression) -> bool:
    if not isinstance(t, cst.Subscript) or len(t.slice) != 1 or not isinstance(t.slice[0].slice, cst.Index):
        return False
    key = t.slice[0].slice.value
    value = t.value
    return (
        isinstance(key, cst.SimpleString)
        and key.evaluated_value == "CUDA_VISIBLE_DEVICES"
        and isinstance(value, cst.Attribute)
        and value.attr.value == "environ"
        and isinstance(value.value, cst.Name)
        and value.value.value == "os"
    )


class GpuCount:
    """The count one interpretation assumes (None: unknown, the first run), and what
    the code said about it."""

    def __init__(self, recorder: Recorder, count: int | None = None, visible: VisibleDevices | None = None) -> None:
        self.recorder = recorder
        self.visible = visible  # a count the file fixes itself: it holds in every run
        self.count = visible.count if visible is not None else count
        self.asked = False  # the file called torch.cuda.device_count()
        self.refuted_at: cst.CSTNode | None = None  # an assert or a raise that this count reaches
        self._guards = 0  # inside branches of a test the model could not decide
        # What this count made the program do, compared across counts by MP032 (a split that waits for
        # one GPU more than it uses): each test decided in a live run, with its truth (None: both ways
        # in one run, a loop's), in the order first met, and the GPUs modules were moved to.
        self.decided: dict[cst.CSTNode, bool | None] = {}
        self.placed_gpus: set[str] = set()

    @contextmanager
    def guarded(self, really: bool = True) -> Iterator[None]:
        """Branches of a test the model cannot decide: an index past the last GPU there may be
        what the test guards against (`if k + 1 < n and ...:`), so none is recorded."""
        self._guards += really
        try:
            yield
        finally:
            self._guards -= really

    @property
    def guarding(self) -> bool:
        """Inside a branch of a test the model could not decide (see guarded)."""
        return self._guards > 0

    def answer(self) -> Val:
        """The value of `torch.cuda.device_count()`."""
        self.asked = True
        return Const(self.count) if self.count is not None else UNK

    # ------------------------------------------------------------ bounds

    def on_assert(self, node: cst.Assert, test: Val) -> bool:
        """An assert on the count that fails ends the path and refutes the count;
        False when it does (the path ends). With the count unknown, evaluating the test
        only says whether it asks the count."""
        if self.count is not None and isinstance(test, Const) and test.value is False:
            self.refute(node)
            return False
        return True

    def on_decided_if(self, stmt: cst.If, taken: bool) -> None:
        """An `if` the model decided: a taken branch (`if n < 2: raise`, or `else: raise`)
        that raises at its top level refutes the count."""
        if self.count is None:
            return
        if taken:
            block: cst.BaseSuite = stmt.body
        elif isinstance(stmt.orelse, cst.Else):
            block = stmt.orelse.body
        else:
            return
        if isinstance(block, cst.SimpleStatementSuite):  # if n < 2: raise ...
            small = list(block.body)
        else:
            small = [x for s in block.body if isinstance(s, cst.SimpleStatementLine) for x in s.body]
        if any(isinstance(x, cst.Raise) for x in small):
            self.refute(stmt)

    def on_decided(self, test: cst.CSTNode, truth: bool) -> None:
        """A test (an `if`'s, or a conditional expression's) the model decided, in a run under a count."""
        if self.count is None or not self.recorder.live or self._guards:
            return
        before = self.decided.setdefault(test, truth)
        if before is not None and before != truth:
            self.decided[test] = None

    def on_module_placed(self, devs: Devs) -> None:
        """A module moved to `devs` (`.to(d)`, `.cuda(i)`) in a live run under a count."""
        d = single(devs)
        if self.count is not None and self.recorder.live and d is not None and d.startswith("cuda:"):
            self.placed_gpus.add(d)

    def refute(self, node: cst.CSTNode) -> None:
        if self.count is not None and self.refuted_at is None and self.recorder.live:
            self.refuted_at = node

    # ------------------------------------------------------------ indices past the last GPU

    def check_device(self, devs: Devs, node: cst.CSTNode) -> bool:
        """A placement on cuda:k with k >= the assumed count, in a live run (not a summary's): reported (outside a
        branch that may guard against it), and True: the program stops there, or never gets there."""
        if self.count is None or not self.recorder.live:
            return False
        d = single(devs)
        if d is None or not d.startswith("cuda:"):
            return False
        try:
            k = int(d[5:])
        except ValueError:
            return False
        if k >= self.count:
            if not self._guards:
                self.recorder.record(
                    NonexistentDevice(node=node, dev=d, count=self.count, what="placement", visible=self.visible)
                )
            return True
        return False

    def check_index(self, seq: SeqV, index: int, node: cst.CSTNode) -> None:
        """`devices[k]` past the end of a list of CUDA devices as long as the count."""
        if self.count is None or not self.recorder.live or seq.items is None or self._guards:
            return
        if len(seq.items) != self.count or not (index >= len(seq.items)):
            return
        devs = [single(as_device(v)) for v in seq.items]
        if all(d is not None and d.startswith("cuda:") for d in devs):
            self.recorder.record(
                NonexistentDevice(node=node, dev=f"cuda:{index}", count=self.count, what="index", visible=self.visible)
            )


def is_test_on_count(node: cst.BaseExpression) -> bool:
    """Whether an assert's test is plain arithmetic on names, numbers, attributes and calls
    (`n >= 4`, `torch.cuda.device_count() > 1`, `len(devices) == n`): evaluating it records
    nothing. A test on tensors may record a mismatch; it is not evaluated."""
    if isinstance(node, (cst.Name, cst.Integer, cst.Attribute)):
        return True
    if isinstance(node, cst.Call):
        f = node.func
        if isinstance(f, (cst.Name, cst.Attribute)) and not node.args:
            return (f.value if isinstance(f, cst.Name) else f.attr.value) == "device_count"
        return isinstance(f, cst.Name) and f.value == "len" and len(node.args) == 1
    if isinstance(node, cst.Comparison):
        return is_test_on_count(node.left) and all(is_test_on_count(c.comparator) for c in node.comparisons)
    if isinstance(node, cst.BinaryOperation):
        return is_test_on_count(node.left) and is_test_on_count(node.right)
    if isinstance(node, cst.BooleanOperation):
        return is_test_on_count(node.left) and is_test_on_count(node.right)
    if isinstance(node, cst.UnaryOperation):
        return is_test_on_count(node.expression)
    return False
