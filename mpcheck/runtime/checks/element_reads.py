"""MP020 at run time: Python reading a GPU tensor's elements on the host one at a time.

Two shapes, each seen where it costs (rules/MP020-host-sync-per-element.md has the measurements):
- Reads of single elements of one GPU tensor (`[v.item() for v in t]`, `int(t[i])` in a loop over `i`),
  or of its small rows (`[row.tolist() for row in topk]`): each element or row Python iterates or
  indexes is a view of `t`, so the reads are counted by the tensor they view, and `ELEMENTS` of them in
  one pass of the model (`passes.py`: a loss, a backward, or the model called again ends one) are a loop
  over its elements. A read of a tensor of its own (a loss's `.item()` each step) is no element of
  anything and is never counted. A view of more than `ROW_BYTES` is a chunk whose copy costs more than
  the wait: not counted.
- Reads of one-value tensors of their own by `.item()` (or `.tolist()`) from one line, `ELEMENTS` of them in
  one pass (a grad norm's `.item()` per parameter): counted by the line (a loss's `.item()` each step is one
  read a pass).
- Values computed from an element an index picked (`if usage[k] == 0:` over the codes `k`), each read on
  the host: counted as reads of that tensor's elements (provenance.py follows the element, `element_of`).
- Reads of one-value tensors by `.item()` from one line of a module hook, `HOOK_READS` of them in one pass (an
  activation monitor on every ReLU), in two passes close together: each stops the forward pass between layers.
- `torch.tensor(items)` of two or more tensors on one GPU: it reads each one's value on the host. Reported
  the first time inside a module's forward (which runs every step), elsewhere the second time its line
  does it, as MP019 is: once is a summary at the end of a run, every step is the cost.

Only host reads are looked at (the mode passes every other call through untouched), and each is a wait
for the GPU already, so the count costs nothing that matters. Nothing here holds a tensor: the counts
are by `id()` of the viewed tensor, forgotten at the end of each pass.

Python's `max(t)` and `sorted(t)` read comparisons of the elements Python iterates, tensors of their own: the
run-time faces leave them to the linter.
"""

from __future__ import annotations

import functools
import os
import sys
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker
    from mpcheck.runtime.checks.sites import Site

# Single-element reads of one tensor in one pass that make a per-element loop: the measured cost at 8
# elements is already 4-15x one read, and fewer reads than this are rarely a loop over a whole tensor.
ELEMENTS = 16

# A view read whole by `.tolist()` counts as one of a loop's reads up to this size: below it one read costs
# about one wait for the GPU whatever its size (rules/MP020-host-sync-per-element.md: a D2H copy's fixed
# cost is some 10 us; 64 KiB more at ~20 GB/s is ~3 us), so a loop of such reads costs one wait each.
ROW_BYTES = 64 * 1024

# Reads of one-value tensors from one line of a module hook (an activation monitor's `.item()` on every layer)
# in one pass: each stops the forward pass between two layers, and a hook on this many modules is one on every
# layer of a kind, not a check made once.
HOOK_READS = 4

# ...in two forward passes this close (counted by outermost module calls: a training step calls a criterion
# too, or a second model).
HOOK_PASSES_APART = 8

_MODULE_PY = os.path.join("torch", "nn", "modules", "module.py")


class ElementReads:
    """Per pass: how many single elements of each viewed GPU tensor were read on the host (by its id)."""

    __slots__ = ("by_line", "counts", "hook_lines", "pass_id", "reported")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.by_line: dict[tuple[str, int], int] = {}  # reads of one-value tensors of their own, by line
        self.pass_id = -1
        self.reported: set[tuple[str, int]] = set()
        # A module hook's line -> the forward pass (tls.forwards) in which it last read HOOK_READS values.
        self.hook_lines: dict[tuple[str, int], int] = {}


def on_host_read(self: Checker, t: Any, how: str) -> None:
    """`t`'s value is about to be read on the host by `how` ("item", "__bool__", ...)."""
    if not self.wants("MP020"):
        return
    base = getattr(t, "_base", None)
    try:
        numel = t.numel()
        if numel != 1 and (base is None or how != "tolist" or numel * t.element_size() > ROW_BYTES):
            return  # `.tolist()` of a whole tensor, or of a large chunk: the fix, not the bug
    except Exception:
        return
    dev = self.devices.device_of(base if base is not None else t)
    if not dev.startswith("cuda"):
        return
    reads = self.element_reads
    if reads.pass_id != self._tls.passes_ended:
        reads.pass_id = self._tls.passes_ended
        reads.counts.clear()
        reads.by_line.clear()
    of = None
    if base is None:
        of = self.provenance.element_of(t)  # a value computed from an indexed element: `usage[k] == 0`
        if of is None:
            if how in ("item", "tolist"):  # (any other comparison's `bool()` is a loop's test: left alone)
                _own_value_read(self, reads, dev, how)
            return
    source, shape, picked = of if of is not None else (id(base), tuple(getattr(base, "shape", ())), "")
    n = reads.counts.get(source, 0) + 1
    reads.counts[source] = n
    if n != ELEMENTS:
        return
    site = self.sites()
    if site is None or (site.path, site.line) in reads.reported:
        return
    reads.reported.add((site.path, site.line))
    read = _READ_WORDS.get(how, f"`{how}`")
    if of is not None:
        unit, part = "one", f"a value computed from {picked}"
    else:
        unit, part = ("one", "a single element") if numel == 1 else ("one part", f"{numel} elements")
    _report(
        self,
        site,
        dev,
        f"Python reads the elements of a tensor on {dev} ({'x'.join(map(str, shape))}) on the host {unit} at a time "
        f"({read} of {part}, "
        f"{ELEMENTS} times in this pass and counting): each read waits for the GPU. Read them all with one "
        f"copy (`t.tolist()`, or `t.cpu()`) and loop over that, or keep the work on the GPU.",
        "read the whole tensor once with `.tolist()` and loop over the list",
    )


def _own_value_read(self: Checker, reads: ElementReads, dev: str, how: str) -> None:
    """A one-value tensor of its own read on the host (a grad norm's `.item()`): one line reading `ELEMENTS` of
    them in one pass is a loop over values that could be stacked and read with one copy (a loss's `.item()`
    each step is one read a pass)."""
    site = self.sites()
    if site is None:
        return
    key = (site.path, site.line)
    n = reads.by_line.get(key, 0) + 1
    reads.by_line[key] = n
    if key in reads.reported or n not in (HOOK_READS, ELEMENTS):
        return
    read = _READ_WORDS.get(how, f"`{how}`")
    if n == HOOK_READS:
        if not _in_module_hook(sys._getframe(1)):
            return
        # Reported when a pass close to the last one did the same: a hook that reads its values every N steps
        # (`if step % 100 == 0:`) costs nothing that matters.
        forwards = self._tls.forwards
        last = reads.hook_lines.get(key)
        reads.hook_lines[key] = forwards
        if last is None or forwards - last > HOOK_PASSES_APART:
            return
        message = (
            f"a module hook reads a value on {dev} on the host at each call of the modules it hooks ({read}, "
            f"{HOOK_READS} times in this pass and counting): each read stops the forward pass between two layers "
            "until the GPU has run all it was given. Keep the values on the GPU (detached) and read them all at once "
            "after the step (`torch.stack(values).tolist()`)."
        )
        fix = "keep the hook's values on the GPU and read them once after the step"
    else:
        message = (
            f"this line reads one-value tensors on {dev} on the host one at a time ({read}, {ELEMENTS} times in "
            "this pass and counting): each read waits for the GPU. Stack the values of each device and read them "
            "with one copy (`torch.stack(values).tolist()`), or keep the work on the GPU."
        )
        fix = "stack the values (per device) and read them once with `.tolist()`"
    reads.reported.add(key)
    _report(self, site, dev, message, fix)


def _in_module_hook(frame: FrameType | None) -> bool:
    """Does `frame` run in a forward hook or pre-hook of a module (or in what one calls), run by nn.Module's
    call? The first frame of torch's `Module._call_impl` up the stack called either the module's forward or one
    of its hooks, registered on it or for every module."""
    from torch.nn.modules import module as nn_module  # (loaded already: a module is being called)

    callee = frame
    up = frame.f_back if frame is not None else None
    while callee is not None and up is not None:
        code = up.f_code
        if code.co_name in ("inner", "_call_impl") and code.co_filename.endswith(_MODULE_PY):
            module = up.f_locals.get("self")
            hooks = (
                *getattr(module, "_forward_hooks", {}).values(),
                *getattr(module, "_forward_pre_hooks", {}).values(),
                *nn_module._global_forward_hooks.values(),
                *nn_module._global_forward_pre_hooks.values(),
            )
            return any(_code_of(hook) is callee.f_code for hook in hooks)
        callee, up = up, up.f_back
    return False


def _code_of(hook: Any) -> CodeType | None:
    """The code a hook runs: a function's, a bound method's, a partial's function's, a callable object's `__call__`."""
    while isinstance(hook, functools.partial):
        hook = hook.func
    hook = getattr(hook, "__func__", hook)
    code = getattr(hook, "__code__", None)
    if code is None and callable(hook):
        code = getattr(type(hook).__call__, "__code__", None)
    return code if isinstance(code, CodeType) else None


def on_tensor_of_tensors(self: Checker, items: Any) -> None:
    """`torch.tensor(items)` is about to run: MP020 when two or more of `items` are tensors on one GPU."""
    if not isinstance(items, (list, tuple)) or len(items) < 2 or not self.wants("MP020"):
        return
    tensors = [x for x in items if isinstance(x, self._tensor)]
    devs = {self.devices.device_of(x) for x in tensors}
    if len(devs) != 1 or len(tensors) < 2:
        return
    (dev,) = devs
    if not dev.startswith("cuda"):
        return
    site = self.sites()
    if site is None:
        return
    key = (site.path, site.line)
    seen = self._tensor_of_tensors.get(key, 0) + 1
    self._tensor_of_tensors[key] = seen
    if seen != (1 if self._tls.stack else 2):
        return
    _report(
        self,
        site,
        dev,
        f"`torch.tensor(...)` of {len(items)} tensors on {dev} reads each one's value on the host, one wait for "
        f"the GPU each, on every pass. `torch.stack(...)` keeps them on the GPU (`.detach()` for a log; `.cpu()` "
        f"after it copies them all at once).",
        "use `torch.stack(...)`",
    )


def _report(self: Checker, site: Site, dev: str, message: str, suggestion: str) -> None:
    """MP020 at `site`: values of a tensor on `dev` read on the host, in the module running now, if any."""
    module = self.current_module()
    self.emit("MP020", site, message, devices=(dev, "cpu"), modules=(module,) if module else (), suggestion=suggestion)


_READ_WORDS = {
    "item": "`.item()`",
    "tolist": "`.tolist()`",
    "__bool__": "`bool()`",
    "__int__": "`int()`",
    "__float__": "`float()`",
    "__index__": "its use as an index",
}
