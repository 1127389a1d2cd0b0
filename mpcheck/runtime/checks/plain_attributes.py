"""A tensor kept on a module as a plain attribute (`self.alpha = alpha`, neither a Parameter nor a buffer):
`module.to(dev)` moves parameters and buffers only, so such a tensor stays where it was made, and the module's
own forward then meets its input with it on another device (a loss's class weights left on the CPU beside
predictions on a GPU). mismatch.py reports it at the use, naming the attribute and the fix (a buffer), and not
the module's input, which is where the module's weights would be."""

from __future__ import annotations

from typing import Any


def plain_attribute(modules: list[Any], t: Any) -> tuple[Any, str] | None:
    """(module, attribute name) of the module among `modules` or their submodules that holds `t` itself as
    a plain attribute; None when none does. Read only on a mismatch (an error path): a walk of the modules."""
    seen: set[int] = set()
    for root in modules:
        for m in root.modules():
            if id(m) in seen:
                continue
            seen.add(id(m))
            for name, value in vars(m).items():
                if value is t and not name.startswith("_"):
                    return m, name
    return None
