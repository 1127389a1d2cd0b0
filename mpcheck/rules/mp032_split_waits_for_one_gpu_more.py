"""MP032: a test on `torch.cuda.device_count()` that splits the model only with more GPUs than the split uses
(`if n_gpus > n_stages:` for a split over `range(n_stages)`), so with exactly as many every part goes to one GPU.

Nothing in one interpretation shows it: with 2 GPUs the program places everything on cuda:0 and runs, as a
program meant for one GPU would. The bug shows only side by side with a larger count: the linter interprets a
file that asks the count once per assumed count (devices/gpucount.py), and each run notes the tests it decided and
the GPUs modules were moved to. Where the fewest allowed count moved modules to fewer GPUs than a larger count
did, although that larger count's GPUs all exist with the fewest (their indices are below it), the split could
have run there: the first test the two runs decided differently is the threshold, reported with both counts.
A split over more GPUs than the fewest count has (`range(n)` with 4) is a choice, not this bug, and is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from mpcheck.finding import Finding
from mpcheck.rules.base import Rule
from mpcheck.rules.context import FileContext


class SplitWaitsForOneGpuMore(Rule):
    code = "MP032"
    needs = ("device_count",)

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        return ()  # one run says nothing: see check_counts

    def check_counts(self, runs: Sequence[tuple[int, FileContext]]) -> Iterator[Finding]:
        """`runs`: the counts the code allows, fewest first, each with its interpretation."""
        if len(runs) < 2:
            return
        fewest, low = runs[0]
        placed_low = low.model.placed_gpus
        for count, ctx in runs[1:]:
            placed = ctx.model.placed_gpus
            if len(placed) < 2 or len(placed_low) >= len(placed) or not all(_index(d) < fewest for d in placed):
                continue  # (an index that is no number sorts past every count: never "exists with the fewest")
            test = next(
                (
                    t
                    for t, truth in low.model.count_decided.items()
                    if truth is not None and ctx.model.count_decided.get(t, truth) not in (truth, None)
                ),
                None,
            )
            if test is None:
                continue
            gpus = ", ".join(sorted(placed, key=_index))
            idle = ", ".join(sorted(placed - placed_low, key=_index))
            yield self.finding(
                low,
                test,
                f"with {fewest} GPUs `{low.code(test)}` is {str(low.model.count_decided[test]).lower()} and the "
                f"model's parts all go to {', '.join(sorted(placed_low, key=_index))}; with {count} it splits them "
                f"over {gpus}, which {fewest} GPUs have too: the split waits for one GPU more than it uses, and "
                f"with {fewest} GPUs {idle} {'idles' if len(placed - placed_low) == 1 else 'idle'}.",
                devices=[*sorted(placed | placed_low, key=_index)],
                suggestion=f"split whenever there are as many GPUs as the split uses (`>=` where it says `>`): "
                f"{len(placed)} here",
            )
            return


def _index(device: str) -> int:
    """cuda:3 -> 3; a device whose index is no number (not known here) sorts last."""
    try:
        return int(device.split(":", 1)[1])
    except ValueError:
        return 1 << 30
