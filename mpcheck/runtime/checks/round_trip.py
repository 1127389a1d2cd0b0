"""MP005: a transfer whose data arrived by a transfer from its destination and was not changed nor read
since (a round trip), or reached the host from one GPU and goes on to another unchanged (a host
detour), or came from the host to one GPU and goes on to another unchanged and unread (a GPU
detour: the host copy went to the wrong GPU); detours are reported from WASTE_MIN_BYTES.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.repeats import move_key
from mpcheck.runtime.checks.sites import UNKNOWN, Site
from mpcheck.runtime.checks.storage_ref import version_of
from mpcheck.runtime.checks.thresholds import NOT_GPU, OFFLOAD_MIN_SHARE, WASTE_MIN_BYTES
from mpcheck.runtime.checks.wording import size_words, tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def _check_round_trip(
    self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int = 0
) -> None:
    try:
        storage = t.untyped_storage()
    except Exception:
        return
    entry = self._arrivals.get(id(storage))
    if entry is None:
        _needed_here(self, site, src_dev, dst_dev)
        return
    ref, came_from, first_site = entry
    if ref.ref() is not storage:
        # The id was reused by another storage: this data did not arrive by a transfer, as if no entry were
        # there (which decides whether a round trip made once started a loop: `_needed_here`).
        del self._arrivals[id(storage)]
        _needed_here(self, site, src_dev, dst_dev)
        return
    # An inference tensor has no version counter (None both times): what changes it in place is an op on it,
    # which the checks below see as a read of it where it arrived, so unread is unchanged there too.
    if version_of(t) != ref.version:
        _needed_here(self, site, src_dev, dst_dev)
        return
    if id(storage) in self._read_arrivals and came_from == dst_dev:
        return  # read where it arrived (a mask the layers there used): the first move was needed
    if came_from == dst_dev and id(storage) in self._selected_arrivals:
        return  # rows picked where it arrived, sent back (a cache reordered there): work, worked_detour.py's
    if came_from != dst_dev:
        if src_dev == "cpu" and came_from not in NOT_GPU and dst_dev not in NOT_GPU:
            self._report_host_hop(
                t, came_from, dst_dev, site, module, first_site, nbytes, id(storage) in self._gathered_arrivals
            )
        elif src_dev not in NOT_GPU and (
            (came_from == "cpu" and dst_dev not in NOT_GPU) or (came_from not in NOT_GPU and came_from != "cpu")
        ):
            if id(storage) not in self._read_arrivals:  # unused where it first landed (so far: arrivals.py)
                _report_gpu_detour(self, t, came_from, src_dev, dst_dev, site, module, first_site, nbytes, id(storage))
        return
    if dst_dev == "cpu" and nbytes < max(self.repeat_min_bytes, WASTE_MIN_BYTES):
        # A few bytes back to the host (a batch's lengths, moved with the rest by a batch mover, wanted on the
        # host by pack_padded_sequence): the copies cost their launch; the program's metadata, not its data.
        return
    made = self._allocations(dst_dev) if self._allocations is not None and src_dev == "cpu" else None
    if made is not None and ref.made is not None and ref.origin is not None and ref.origin() is None:
        # Kept on the host while its original on dst_dev is gone: an offload, when dst_dev made new storages
        # meanwhile besides this copy's own (its memory served other work); with none made, holding on to the
        # original would have cost nothing. A face that does not count allocations (real GPUs) reports as for
        # an original still there; so does a trip through another GPU (a stage's input sent back unused).
        if made > ref.made + 1:
            held = _held_on(self, dst_dev)
            if held is None or nbytes >= OFFLOAD_MIN_SHARE * held:
                return
            why = (
                f"its copy on {dst_dev} was freed meanwhile, but {size_words(nbytes)} is "
                f"{100 * nbytes / held:.1f}% of the {size_words(held)} {dst_dev} holds: too little freed for two copies"
            )
            fix = f"keep the tensor on {dst_dev} until it is used again"
        else:
            why = (
                f"its copy on {dst_dev} was freed meanwhile, but nothing was allocated on {dst_dev} before it came back"
            )
            fix = f"keep the tensor on {dst_dev} until it is used again (the offload frees memory nothing uses)"
    else:
        why = f"no work was done on {src_dev}"
        fix = f"keep using the tensor that is still on {dst_dev}"
    finding: dict[str, Any] = dict(
        message=f"round trip: this data was moved {dst_dev} -> {src_dev} at {first_site} and is moved back to "
        f"{dst_dev} here unchanged ({why})",
        devices=(dst_dev, src_dev),
        modules=(module,) if module else (),
        suggestion=f"{fix}; drop both transfers",
        extra={"first_site": str(first_site), "first_line": first_site.line, "first_path": first_site.path},
    )
    if self.ledger.step_index > 0:
        # The program has trained: a trip made once after training (a tied copy brought back to check it against
        # its original at the end of a run) costs once; one inside the training loop shows again at the next step
        # (repeats.judge_repeats_after_training, as for MP011's repeats).
        self._repeats_since_step.append(
            (site or UNKNOWN, finding, False, move_key(t, storage, dst_dev), "MP005", None, None)
        )
        return
    found = self.emit("MP005", site, **finding)
    if found is not None and found.extra.get("count") == 1 and site is not None:  # seen again, it stays
        self._round_trips_once[(site.path, site.line, src_dev, dst_dev)] = site


def _held_on(self: Checker, dev: str) -> int | None:
    """The bytes `dev` holds now, where the face knows them (the virtual GPUs), else None. A copy kept off `dev`
    is an offload only from OFFLOAD_MIN_SHARE of that: a recurrent state sent to the host between two chunks
    (`h.detach().cpu()` where `h.detach()` was meant) frees a few hundred KiB of a GPU that holds the model.
    Unknown: taken for an offload, as before."""
    held = self._held_bytes() if self._held_bytes is not None else None
    total = held.get(dev) if held else None
    return total if total else None


def _needed_here(self: Checker, site: Site | None, src_dev: str, dst_dev: str) -> None:
    """This line moves data made or changed on `src_dev` (no round trip): a round trip it made once before
    was the first pass of a loop that grows the data there (a beam's sequences, sent back to the first
    stage each step), how the loop starts rather than a copy this line could drop: taken back."""
    if self._round_trips_once and site is not None:
        once = self._round_trips_once.pop((site.path, site.line, src_dev, dst_dev), None)
        if once is not None:
            self.withdraw("MP005", once, (dst_dev, src_dev))


def _report_host_hop(
    self: Checker,
    t: Any,
    gpu: str,
    dst_dev: str,
    site: Site | None,
    module: str | None,
    first_site: Site,
    nbytes: int,
    gathered: bool = False,
) -> None:
    """GPU -> host -> GPU with no work on the host (`gathered`: none but stacking the copies there): one direct
    device-to-device copy does the same. Below WASTE_MIN_BYTES both copies cost about their launch: silent."""
    if nbytes < max(self.repeat_min_bytes, WASTE_MIN_BYTES):
        return
    if gathered:
        message = (
            f"host detour: this data ({tensor_words(t)}, {size_words(nbytes)}) was copied piece by piece from the GPUs "
            f"to the host (from {gpu} first, at {first_site}), only stacked there, and goes on to {dst_dev} here: "
            f"every piece crosses the host link twice where one copy of each to {dst_dev} would do"
        )
        fix = f"move each piece straight to {dst_dev} and stack them there; drop the copies to the host"
    else:
        message = (
            f"host detour: this data ({tensor_words(t)}, {size_words(nbytes)}) was copied {gpu} -> cpu at "
            f"{first_site} and goes on to {dst_dev} here unchanged: two copies over the host link where one "
            f"{gpu} -> {dst_dev} copy would do"
        )
        fix = f"move the tensor that is still on {gpu} straight to {dst_dev} with `.to('{dst_dev}')`; drop the copy to the host"
    self.emit(
        "MP005",
        site,
        message,
        devices=(gpu, "cpu", dst_dev),
        modules=(module,) if module else (),
        suggestion=fix,
        extra={"first_site": str(first_site), "first_line": first_site.line, "first_path": first_site.path},
    )


def _report_gpu_detour(
    self: Checker,
    t: Any,
    origin: str,
    first: str,
    dst_dev: str,
    site: Site | None,
    module: str | None,
    first_site: Site,
    nbytes: int,
    sid: int,
) -> None:
    """origin -> GPU a -> b, unread on a: one origin -> b copy does the same. From the host: a batch staged
    on the output stage's GPU, then moved to the input stage's; from a GPU: targets carried through every
    stage of a pipeline although only the last one reads them. Below WASTE_MIN_BYTES both cost about their
    launch. Taken back if the copy on a is read there later (features both stages need: arrivals._note_read)."""
    if nbytes < max(self.repeat_min_bytes, WASTE_MIN_BYTES):
        return
    if sid in self._selected_arrivals:
        # rows picked from data that nothing reads where it was put (a dataset kept on the wrong GPU)
        what = (
            f"rows ({tensor_words(t)}, {size_words(nbytes)}) picked on {first} from data copied {origin} -> {first} "
            f"at {first_site} and not used there otherwise"
        )
        fix = f"keep that data on {dst_dev} (copy it there at {first_site}), where its rows are used"
    else:
        what = f"this data ({tensor_words(t)}, {size_words(nbytes)}) was copied {origin} -> {first} at {first_site}, not used there,"
        fix = (
            f"copy it from {'the host' if origin == 'cpu' else origin} straight to {dst_dev} at {first_site} "
            f"(`.to('{dst_dev}')`); drop this copy"
        )
    found = self.emit(
        "MP005",
        site,
        f"GPU detour: {what} and goes on to {dst_dev} here unchanged: two copies where one {origin} -> "
        f"{dst_dev} copy would do",
        devices=(origin, first, dst_dev),
        modules=(module,) if module else (),
        suggestion=fix,
        extra={"first_site": str(first_site), "first_line": first_site.line, "first_path": first_site.path},
    )
    if found is not None and found.extra.get("count") == 1:  # (once seen again, it stays: withdraw's rule)
        self._unless_read[sid] = ("MP005", site or UNKNOWN, (origin, first, dst_dev))
