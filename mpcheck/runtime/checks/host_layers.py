"""MP031 at run time: layers of a model whose other parts are on GPUs compute on the CPU, because the code that
placed their siblings never reached them (`for blk, dev in zip(model.blocks, devices)` with fewer devices than
blocks, a placing loop that `break`s at a layer without parameters). Nothing fails: PyTorch runs the forgotten
layers on the host, the forward moves the activations there and back, and a step takes many times longer.

At a root model's first call (`on_root_call`), when its parameters are on a GPU and on the CPU, the compute layers
left on the CPU (torch.nn layers with weights that do arithmetic: linear, convolution, recurrent, attention) are
noted. The first such layer that then runs checked (a torch.nn leaf at its module-entry check, `on_host_layer`) is
reported once for its model, where the loop that placed the sibling nearest to it stopped (its `break`, or its `for`
line whose iterable ran out), or at the call when nothing inside the model was placed by a move of its own. Embedding tables are never counted: a table
kept on the host on purpose (too large for the GPU, looked up there, its rows sent over) is a known design.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, cast

from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.sites import Site

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker

_NAMES_SHOWN = 3  # host layers named in the message; the rest are counted


def _compute_layer_types() -> tuple[type, ...]:
    import torch.nn as nn

    return (
        nn.Linear,
        nn.Bilinear,
        nn.modules.conv._ConvNd,
        nn.RNNBase,
        nn.modules.rnn.RNNCellBase,
        nn.MultiheadAttention,
    )


class HostLayers:
    """Per root model (by id, with a weak reference): the compute layers it left on the CPU, by id -> (path,
    parameter count), and whether the model was reported."""

    def __init__(self) -> None:
        self.roots: dict[int, tuple[weakref.ref[Any], dict[int, tuple[str, int]], list[bool]]] = {}
        self.types: tuple[type, ...] | None = None
        self.plain: set[int] = set()  # ids of those layers held in a plain list, tuple or dict (no submodules)

    def __bool__(self) -> bool:
        return bool(self.roots)


def note_root(self: Checker, root: Any, below: frozenset[str]) -> None:
    """A root model's first call: its compute layers on the CPU, where the rest of it is on a GPU; and the layers
    on the CPU that its modules hold in plain lists, tuples or dicts (`self.blocks = [Block() ...]`: no
    submodules, so no `.to()` of the model reached them, and `below`, its parameters' devices, leaves them out)."""
    if not any(d.startswith("cuda") for d in below) or not self.wants("MP031"):
        return
    table = self.host_layers
    if table.types is None:
        table.types = _compute_layer_types()
    left: dict[int, tuple[str, int]] = {}
    if "cpu" in below:
        for name, m in root.named_modules():
            _note_if_left(self, m, name, left)
    module_type = _module_type()
    for name, m in root.named_modules():
        for attr, held in vars(m).items():
            if attr.startswith("_") or type(held) not in (list, tuple, dict):
                continue
            items = held.items() if type(held) is dict else enumerate(held)
            for key, item in list(items)[:_MAX_HELD]:
                if isinstance(item, module_type):
                    where = f"{name}.{attr}" if name else attr
                    for sub, part in cast(Any, item).named_modules():
                        _note_if_left(self, part, f"{where}[{key!r}]" + (f".{sub}" if sub else ""), left, plain=True)
    if not left:
        return
    if len(table.roots) >= PURGE_AT:
        for k in [k for k, v in table.roots.items() if v[0]() is None]:
            del table.roots[k]
    table.roots[id(root)] = (weakref.ref(root), left, [False])


_MAX_HELD = 64  # items of one plain container looked at (a list of layers, not a dataset)


def _module_type() -> type:
    import torch.nn as nn

    return nn.Module


def _note_if_left(self: Checker, m: Any, name: str, left: dict[int, tuple[str, int]], plain: bool = False) -> None:
    """`m`, a compute layer whose own weights are all on the CPU, into `left` (its name, its parameter count)."""
    from torch.nn.parameter import is_lazy

    layer_types = self.host_layers.types
    assert layer_types is not None
    if not isinstance(m, layer_types) or hasattr(m, "_hf_hook"):  # (accelerate's offload brings weights in)
        return
    own = list(cast(Any, m).parameters(recurse=False))
    if not own or any(is_lazy(p) for p in own):  # (a lazy layer is placed as it first runs)
        return
    device_of = self.devices.device_of
    if all(device_of(p) == "cpu" for p in own):
        left[id(m)] = (name, sum(p.numel() for p in own))
        if plain:
            self.host_layers.plain.add(id(m))


def on_host_layer(self: Checker, module: Any, path: str) -> None:
    """A torch.nn leaf on the CPU runs checked: one that its model left there is reported (once per model)."""
    for key, (ref, left, reported) in list(self.host_layers.roots.items()):
        root = ref()
        if root is None:
            del self.host_layers.roots[key]
            continue
        if id(module) not in left or reported[0]:
            continue
        reported[0] = True
        _report(self, root, module, path, left)
        return


def _report(self: Checker, root: Any, module: Any, path: str, left: dict[int, tuple[str, int]]) -> None:
    names = {id(m): name for name, m in root.named_modules()}
    gpus = sorted(d for d in self._devices_below(root) if d.startswith("cuda"))
    own_name = left[id(module)][0]
    if id(module) in self.host_layers.plain:
        _report_plain(self, module, own_name, gpus, left)
        return
    site, move_line = _placing_site(self, root, own_name, names)
    shown = [name for name, _ in left.values()][:_NAMES_SHOWN]
    more = len(left) - len(shown)
    listed = ", ".join(f"`{n}`" for n in shown) + (f" and {more} more" if more else "")
    params = sum(n for _, n in left.values())
    where = (
        f"; the loop here stopped before them (its move at line {move_line} placed the parts beside them)"
        if site is not None
        else ""
    )
    self.emit(
        "MP031",
        site or self.sites(),
        f"`{path}` ({type(module).__name__}) computes on the CPU while the rest of the model is on "
        f"{', '.join(gpus)}: {len(left)} layer(s) with {params:,} parameters were left where they were built "
        f"({listed}){where}",
        devices=("cpu", *gpus),
        modules=(path,),
        suggestion="place every part of the model on a GPU: check the loop that places them (a `zip` with fewer "
        "devices than parts stops early, a `break` at a part without parameters skips the rest)",
        extra={"host_layers": [n for n, _ in left.values()], "host_parameters": params},
    )


def _report_plain(self: Checker, module: Any, name: str, gpus: list[str], left: dict[int, tuple[str, int]]) -> None:
    """A layer held in a plain list (`blocks[0].conv`) runs on the CPU: no `.to()` of the model reaches it."""
    held = name.split("[", 1)[0]
    plain = [n for k, (n, _) in left.items() if k in self.host_layers.plain]
    params = sum(c for k, (_, c) in left.items() if k in self.host_layers.plain)
    self.emit(
        "MP031",
        self.sites(),
        f"`{name}` ({type(module).__name__}) computes on the CPU while the rest of the model is on {', '.join(gpus)}: "
        f"`{held}` holds it in a plain Python container, which is no submodule, so no `.to()` of the model reached "
        f"it ({len(plain)} layer(s), {params:,} parameters), and `model.parameters()` leaves it out of the optimizer "
        f"too",
        devices=("cpu", *gpus),
        modules=(name,),
        suggestion=f"hold `{held}`'s layers in `nn.ModuleList(...)` (or `nn.ModuleDict`)",
        extra={"host_layers": plain, "host_parameters": params, "plain_container": held},
    )


def _placing_site(self: Checker, root: Any, name: str, names: dict[int, str]) -> tuple[Site | None, int]:
    """Where the placing of `name`'s siblings stopped (_why_the_loop_stopped), around the move of the module nearest to
    it in the model (the longest shared path, the latest move), and that move's line; (None, 0) when nothing inside
    the model was moved on its own."""
    best: tuple[int, int, Site] | None = None
    parts = name.split(".")
    for mover, mv in self.placements.moves_inside(root):
        if mover is root or mv.target == "cpu":
            continue
        other = names.get(id(mover))
        if other is None:
            continue
        shared = 0
        for a, b in zip(parts, other.split(".")):
            if a != b:
                break
            shared += 1
        if best is None or (shared, mv.seq) > best[:2]:
            best = (shared, mv.seq, mv.site)
    if best is None:
        return None, 0
    return _why_the_loop_stopped(best[2]), best[2].line


def _why_the_loop_stopped(move: Site) -> Site:
    """Where the placing loop around the move at `move` stopped early: its `break` (`if no parameters: break`),
    else its `for` line, whose iterable ran out (`zip(blocks, devices)` with fewer devices); the move itself when
    it is in no loop of its file (or the file cannot be read). Read once per finding, from the source."""
    import ast
    import linecache

    try:
        tree = ast.parse("".join(linecache.getlines(move.path)))
    except (SyntaxError, ValueError):
        return move
    loops = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.For) and n.body[0].lineno <= move.line <= (n.body[-1].end_lineno or n.body[-1].lineno)
    ]
    if not loops:
        return move
    loop = max(loops, key=lambda n: n.lineno)  # the innermost
    breaks = [n for n in _own_nodes(loop.body) if isinstance(n, ast.Break)]
    at = breaks[0] if breaks else loop
    return Site(move.path, at.lineno, move.function, None, at.col_offset + 1)


def _own_nodes(body: list[Any]) -> list[Any]:
    """The nodes of a loop's body, not those of loops or functions inside it (their `break` is their own)."""
    import ast

    out, todo = [], list(body)
    while todo:
        n = todo.pop()
        out.append(n)
        if not isinstance(n, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))
    return out
