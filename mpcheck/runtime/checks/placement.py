"""Where things were put before a mismatch: the root cause when it lies before the call that fails.

Three records, each cheap and kept only as long as what it describes lives:
- a tensor made on the *current* device (a bare `.cuda()`, `.to('cuda')`, `device='cuda'`, a factory
  under `torch.set_default_device('cuda')`) in a method of a module that lives on another GPU (a stage on
  cuda:1 while cuda:0 is current): its line, by storage. Most such tensors are moved on before use
  (`.to(x.device)`); only one that meets its module's tensors unmoved is reported, at this line (MP004);
- a module moved by `Module.cuda()` / `Module.to(...)`: the line, the target, whether the target was the
  current device (no index given) and which device was current then;
- a module built: the line that called its class (for a module never placed anywhere).

The checker asks `explain()` what lies behind a module's input on the wrong device.
"""

from __future__ import annotations

import linecache
import re
import weakref
from dataclasses import dataclass
from typing import Any

from mpcheck.runtime.checks.sites import Site

_PURGE_AT = 1024
_MOVES_KEPT = 4  # per module: the last few moves are what a finding names


@dataclass(frozen=True)
class Made:
    """A tensor made on the current device inside a module's method, off that module's GPU; or outside
    any module while the current device was another GPU than cuda:0 (module "", module_device None):
    set_device or a `torch.cuda.device` block chose where it landed, not the line that put it there."""

    site: Site
    how: str  # "a bare `.cuda()`", "`device='cuda'`", ...
    device: str  # the current device it landed on
    module: str  # the module whose method made it
    module_device: str | None
    # Made in the forward of a model split over these GPUs (module_device None): `device="cuda"` there is
    # whichever GPU is current, not the stage's that will use it.
    split_over: tuple[str, ...] = ()

    def explains(self, on: str, needed: str) -> bool:
        """Is this placement why the tensor, on `on`, meets tensors on `needed`?"""
        if self.device != on:
            return False
        if self.split_over:
            return needed != on and needed in self.split_over
        if self.module_device is None:
            return needed != on and needed.startswith("cuda")
        return needed == self.module_device


@dataclass(frozen=True)
class Move:
    """`module.cuda()` / `module.to(...)`."""

    seq: int
    site: Site
    target: str
    implicit: bool  # no index given: the current device
    current: str | None  # the current CUDA device at that time


@dataclass(frozen=True)
class Cause:
    """What a finding reports instead of the call that fails: code, line, message, fix."""

    code: str
    site: Site
    message: str
    suggestion: str
    devices: tuple[str, ...]
    modules: tuple[str, ...]
    # The module whose placement is the bug (never placed, shared and moved, placed on the current device):
    # its input is where the fix wants it, and its own weights are the ones off their device.
    misplaced: Any = None


class Placements:
    def __init__(self) -> None:
        self._made: dict[int, tuple[weakref.ref[Any], Made]] = {}
        # Made outside any module (a batch's bare `.cuda()` after set_device(1)): kept apart, as ops
        # derive records only from `_made` (a training loop's every batch would make every op pay).
        self._made_outside: dict[int, tuple[weakref.ref[Any], Made]] = {}
        self._moves: weakref.WeakKeyDictionary[Any, list[Move]] = weakref.WeakKeyDictionary()
        # module -> (the line that built it, the number of moves recorded before it was built)
        self._built: weakref.WeakKeyDictionary[Any, tuple[Site, int]] = weakref.WeakKeyDictionary()
        self._seq = 0

    # -- records ------------------------------------------------------------------------
    def made(self, t: Any, made: Made) -> None:
        try:
            storage = t.untyped_storage()
        except Exception:  # a tensor without storage: nothing to follow
            return
        # Ops derive records from `_made` only; a CPU record (host_made.py) exists only in a program that is
        # about to fail, so what is computed from it is followed too (`exp_avg * beta1` in a user's step).
        table = (
            self._made
            if made.module_device is not None or made.split_over or made.device == "cpu"
            else self._made_outside
        )
        if len(table) >= _PURGE_AT:
            for k in [k for k, v in table.items() if v[0]() is None]:
                del table[k]
        table[id(storage)] = (weakref.ref(storage), made)

    def made_of(self, t: Any) -> Made | None:
        if not self._made and not self._made_outside:
            return None
        try:
            storage = t.untyped_storage()
        except Exception:
            return None
        entry = self._made.get(id(storage)) or self._made_outside.get(id(storage))
        if entry is None or entry[0]() is not storage:
            return None
        return entry[1]

    def derive(self, args: tuple[Any, ...], out: Any, device_of: Any) -> None:
        """`out` was computed from `args`: when one of them was made on the current device (recorded above)
        and `out` lands on that device too (`pos.float()`, `pos[None] * 2`), `out` inherits the record, so
        a mismatch of the derived tensor is still reported where the first one was made. Asked only while
        some record exists (`self._made` non-empty)."""
        made = None
        for a in args:
            if isinstance(a, (list, tuple)):
                a = a[0] if a else None
            if a is None or not hasattr(a, "untyped_storage"):
                continue
            made = self.made_of(a)
            if made is not None:
                break
        if made is None:
            return
        outs = out if isinstance(out, (list, tuple)) else (out,)
        for o in outs:
            if hasattr(o, "untyped_storage") and device_of(o) == made.device and self.made_of(o) is None:
                self.made(o, made)

    def moved(self, module: Any, site: Site, target: str, *, implicit: bool, current: str | None) -> None:
        self._seq += 1
        try:
            moves = self._moves.setdefault(module, [])
        except TypeError:  # not weakly referenceable
            return
        moves.append(Move(self._seq, site, target, implicit, current))
        del moves[:-_MOVES_KEPT]

    def built(self, module: Any, site: Site) -> None:
        try:
            self._built[module] = (site, self._seq)
        except TypeError:
            pass

    def built_at(self, module: Any) -> Site | None:
        entry = self._built.get(module)
        return entry[0] if entry is not None else None

    def moves_of(self, module: Any) -> list[tuple[Any, Move]]:
        """Every recorded move that moved `module` (on it or on a module that contains it), oldest first.
        A move made before `module` was built did not move it, although the mover holds it now (an
        adapter injected into blocks already placed)."""
        entry = self._built.get(module)
        since = entry[1] if entry is not None else 0
        found: list[tuple[Any, Move]] = []
        for mover, moves in list(self._moves.items()):
            if mover is module or any(m is module for m in mover.modules()):
                found.extend((mover, mv) for mv in moves if mv.seq > since)
        return sorted(found, key=lambda pair: pair[1].seq)

    def moves_inside(self, root: Any) -> list[tuple[Any, Move]]:
        """Every recorded move of `root` or of a module inside it, oldest first."""
        found: list[tuple[Any, Move]] = []
        for mover, moves in list(self._moves.items()):
            if mover is root or contains(root, mover):
                found.extend((mover, mv) for mv in moves)
        return sorted(found, key=lambda pair: pair[1].seq)


# A CUDA index written out in the source: "cuda:1", .cuda(1), torch.device("cuda", 1), .to(1).
_LITERAL_INDEX = re.compile(r"""cuda:\d|\.cuda\(\s*\d|device\(\s*['"]cuda['"]\s*,\s*\d|\.to\(\s*\d""")


def names_device_index(site: Site) -> bool:
    """Does the source line at `site` write a CUDA index out (rather than take a device from a variable)?"""
    return bool(_LITERAL_INDEX.search(linecache.getline(site.path, site.line)))


def contains(outer: Any, inner: Any) -> bool:
    return any(m is inner for m in outer.modules())


def _kind(module: Any) -> str:
    return type(module).__name__


def made_cause(made: Made, use: Site, what: str, needed: str) -> Cause:
    """MP004: a tensor made on the current device meets tensors on `needed` (its stage's, or any other GPU's
    for one made outside a module after the current device moved off cuda:0). MP001: one made on the CPU
    by a factory without device= inside a module on a GPU (host_made.py)."""
    if made.device == "cpu":
        if made.split_over:
            inside = f"inside '{made.module}' which is split over {', '.join(made.split_over)}"
        elif made.module_device is not None:
            inside = f"inside '{made.module}' whose parameters are on {made.module_device}"
        else:
            inside = f"in `{made.module}`"  # an optimizer step the user wrote (host_made.py)
        return Cause(
            "MP001",
            made.site,
            f"{made.how} here makes a tensor on the CPU, {inside}; it meets tensors on {needed} unmoved at "
            f"{use} ({what}), where the call fails",
            "create it on the device of the tensors it is used with: `device=x.device` (or "
            f"`device='{needed}'`) in this call",
            (needed, "cpu"),
            (made.module,),
        )
    if made.split_over:
        return Cause(
            "MP004",
            made.site,
            f"{made.how} here puts a tensor on the current device {made.device}, inside '{made.module}' which is "
            f"split over {', '.join(made.split_over)}; it meets tensors on {needed} unmoved at {use} ({what}), "
            "where the call fails",
            "create it on the device of the tensors it is used with (`device=x.device`) instead of the current device",
            (needed, made.device),
            (made.module,),
        )
    if made.module_device is None:
        return Cause(
            "MP004",
            made.site,
            f"{made.how} here puts a tensor on the current device {made.device} (torch.cuda.set_device or a "
            f"`torch.cuda.device` block chose it, not this line); it meets tensors on {needed} unmoved at {use} "
            f"({what}), where the call fails",
            f"name the device it is meant for (`.to('{needed}')`, or the device of the module that takes it) "
            "instead of the current device",
            (needed, made.device),
            (),
        )
    return Cause(
        "MP004",
        made.site,
        f"{made.how} here puts a tensor on the current device {made.device}, inside '{made.module}' whose "
        f"parameters are on {made.module_device}; it meets tensors on {made.module_device} unmoved at {use} "
        f"({what}), where the call fails",
        f"create it on the module's device (`device=x.device`, `.to(self.<weight>.device)` or `.to('{made.module_device}')`) "
        "instead of the current device",
        (made.module_device, made.device),
        (made.module,),
    )


def module_cause(
    placements: Placements,
    module: Any,
    path: str,
    module_dev: str,
    input_dev: str,
    use: Site,
    *,
    name: Any,
    outermost_unplaced: Any,
) -> Cause | None:
    """Why a module on `module_dev` gets its input on `input_dev`, when the cause lies where modules were
    placed: a module shared by two stages and moved by the second one (MP007 at that move, as the
    linter says it: the move collapses part of the split), a module
    placed on the current device after set_device changed it (MP004 at that placement), or a module never
    placed at all (MP001 where it was built). None: the input is what is wrong (the call's own finding).

    name(module) names a module; outermost_unplaced(module) is the outermost module containing it whose
    parameters and buffers all sit on the CPU (itself at least)."""
    moves = placements.moves_of(module)
    if moves:
        last_mover, last = moves[-1]
        if last.target != module_dev:
            return None
        for mover, mv in reversed(moves[:-1]):
            if (
                mv.target == input_dev
                and mover is not last_mover
                and not contains(mover, last_mover)
                and not contains(last_mover, mover)
            ):
                first_name, second_name = name(mover), name(last_mover)
                return Cause(
                    "MP007",
                    last.site,
                    f"{_kind(module)} '{path}' is shared: the same module object is inside '{first_name}' and "
                    f"'{second_name}'. This line moves it to {module_dev} after {mv.site} placed it on {input_dev} "
                    f"with '{first_name}', whose forward then gives it input on {input_dev} (at {use})",
                    "give each stage its own module (build one per stage, or copy.deepcopy it): a module built "
                    "once, such as a default argument `norm=nn.LayerNorm(d)` or one list of blocks put in two "
                    "nn.Sequential, is one module, and a module lives on one device",
                    (module_dev, input_dev),
                    (path,),
                    misplaced=module,
                )
        if (
            last.implicit
            and last.current is not None
            and last.current != "cuda:0"
            and input_dev.startswith("cuda")
            and input_dev != module_dev
        ):
            return Cause(
                "MP004",
                last.site,
                f"this index-less placement puts '{name(last_mover)}' on the current device {module_dev}, which "
                f"torch.cuda.set_device (or `with torch.cuda.device`) had made current; its input arrives on "
                f"{input_dev} (at {use})",
                f"name the device: `.to('{input_dev}')` if this stage is meant for {input_dev}; an index-less "
                "`.cuda()` follows whatever set_device said last",
                (module_dev, input_dev),
                (path,),
                misplaced=module,
            )
        return None
    if module_dev != "cpu" or not input_dev.startswith("cuda"):
        return None
    outer = outermost_unplaced(module)
    built = placements.built_at(outer)
    where = f"built at {built}" if built is not None else "built"
    outer_name = name(outer)
    return Cause(
        "MP001",
        built if built is not None else use,
        f"{_kind(outer)} '{outer_name}' was never placed on a GPU ({where} and never moved: its parameters are on "
        f"the CPU), while its input at {use} is on {input_dev}",
        f"place it where it is built: `.to('{input_dev}')` (or, if it is meant to run on the CPU, move its input "
        "with `.to('cpu')`)",
        ("cpu", input_dev),
        (outer_name,) if outer_name == path else (outer_name, path),
        misplaced=module,
    )
