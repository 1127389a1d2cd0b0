"""Write the HTML report of a session: what `--html FILE` and `write_html(path)` do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mpcheck.runtime.checks.html.model import page_data
from mpcheck.runtime.checks.html.placement import Placement, refresh
from mpcheck.runtime.checks.html.render import render

# The debug mode's page (`mpcheck run --html`, `mpcheck.debug(html=...)`): the dry run has its own.
RUN_TITLE = "mpcheck runtime report"
RUN_SUBTITLE = "real GPUs: memory is torch's peak allocated; times are the copies' GPU times"


def write_html(
    path: str,
    *,
    session: Any,
    placement: Placement,
    report: Mapping[str, Any],
    title: str,
    subtitle: str = "",
    capacities: Mapping[str, int] | None = None,
) -> None:
    """The page of `report` (the face's json report) to the file `path`; the module placement is
    `placement`'s, refreshed from the models still alive, and the timeline the ledger's kept events."""
    from mpcheck.runtime.checks.ranks import RankEnv

    refresh(session, placement)
    env = RankEnv.from_env()
    if env is not None:  # one page per rank (its file name has the rank too)
        title = f"{title}, rank {env.rank} of {env.world_size}"
    ledger = session.checker.ledger
    data = page_data(
        report,
        placement.rows.values(),
        events=ledger.events,
        step_marks=ledger.step_marks,
        capacities=capacities,
        title=title,
        subtitle=subtitle,
    )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render(data))


def cuda_capacities() -> dict[str, int]:
    """The real GPUs' memory, for the bars (empty where torch cannot say)."""
    try:
        import torch

        return {
            f"cuda:{i}": int(torch.cuda.get_device_properties(i).total_memory) for i in range(torch.cuda.device_count())
        }
    except Exception:  # noqa: BLE001 - no CUDA, or a device that cannot be read: bars without capacity
        return {}
