"""MP011: the same unchanged data moved to the same device again (`_check_repeat`, by storage, view
and version), or a fresh tensor computed only from buffers and constants copied again at the same
line (`_check_const_copy`, provenance.py); reported only where it recurs in the model's work
(recurrence.py) and from REPEAT_MIN_BYTES. A move that activation checkpointing's recomputation makes
again in backward, of the same data as the forward's move (`_check_recomputed_move`), is one too, and so is
a parameter that lives on the host and is copied to a GPU inside a forward pass on every step
(`_check_host_parameter`): its data changes at each optimizer step, but where it lives does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpcheck.runtime.checks.purge import PURGE_AT
from mpcheck.runtime.checks.recurrence import recurs
from mpcheck.runtime.checks.sites import UNKNOWN, Site
from mpcheck.runtime.checks.storage_ref import StorageRef, version_of
from mpcheck.runtime.checks.thresholds import GPU_CONST_COPY_MIN_BYTES, NOT_GPU
from mpcheck.runtime.checks.wording import tensor_words

if TYPE_CHECKING:
    from mpcheck.runtime.checks.checker import Checker


def move_key(t: Any, storage: Any, dst_dev: str) -> tuple[Any, ...]:
    """The same data moved to the same place: storage, view (offset, shape, strides) and destination."""
    return (id(storage), t.storage_offset(), tuple(t.shape), t.stride(), dst_dev)


def _check_repeat(
    self: Checker, t: Any, dst_dev: str, site: Site | None, module: str | None, arrival_sid: int | None = None
) -> bool:
    """MP011 on the same unchanged data moved again; True when reported (or held: judge_repeats_after_training).
    `arrival_sid`: the storage of the copy, whose rows an index may pick later."""
    try:
        storage = t.untyped_storage()
    except Exception:
        return False
    sid = id(storage)
    if sid in self.provenance.running_stats or sid in self.provenance.unseen_writes:
        return False  # changed unseen by its version counter: BatchNorm's statistics, `.data` writes (provenance.py)
    key = move_key(t, storage, dst_dev)
    entry = self._moves.get(key)
    step = self.ledger.step_index
    mark = self._run_mark()
    in_library = site is not None and site.context is not None
    rounds = self.rounds
    here = (site.path, site.line) if site is not None else None
    last_at = self._last_moved_at
    if here is not None and (here in last_at or len(last_at) < PURGE_AT):
        last_at[here] = key
    if (
        entry is not None
        # The line of the first copy went on to move other data before this one came again: a pass over a data
        # set (a no-grad pass over the batches to compute a centre, then the training pass over the same
        # batches), each batch copied once per pass, not data copied again on every step.
        and last_at.get((entry[1].path, entry[1].line), key) == key
        and entry[0].ref() is storage
        and entry[0].version is not None
        and entry[0].version == version_of(t)
        and rounds - entry[4] <= 1  # moved again in this iteration or the next: on every step (recurrence.py)
        and recurs(entry[3], mark, in_library=in_library, in_graph=t.requires_grad and self._grad_enabled())
    ):
        first_site, first_step, same_round = entry[1], entry[2], entry[4] == rounds
        other_forward = bool(self._tls.stack) and entry[3][1] != mark[1]  # (Mark: tls.forwards second)
        entry[2], entry[3], entry[4] = step, mark, rounds
        when = "in this step" if first_step == step else "in an earlier step, and it has not changed since"
        finding: dict[str, Any] = dict(
            message=f"repeated transfer: the same unchanged data ({tensor_words(t)}) was already moved to "
            f"{dst_dev} {when} (at {first_site})",
            devices=(self.devices.device_of(t), dst_dev),
            modules=(module,) if module else (),
            suggestion=f"move it to {dst_dev} once and reuse the copy (e.g. keep it as a buffer on {dst_dev})",
            extra={"first_site": str(first_site), "scope": "step" if first_step == step else "steps"},
        )
        if step > 0:
            # The program has trained: whether this repeat is per-step waste or a one-time copy after training
            # (evaluating the model twice at the end of a run, the same inputs moved for each) is known only
            # when another step comes, or the same line repeats again (`judge_repeats_after_training`).
            # A script's stand-in batch (random data drawn on the host, copied outside the model or by the model's
            # forward it was given to) is judged with the
            # iteration it was copied in (judge_repeats_after_training); anything else: None.
            origin = self.provenance.drawn_from(t)
            if self._tls.stack and sid not in self._tls.top_inputs:
                origin = None  # (drawn data the model's forward made and copied: no input it was given)
            if origin is not None and other_forward:
                # A stand-in batch the model was given again and copied again by its forward (a training pass,
                # then an evaluation pass over the same batch): each forward moves what it is given, as it would
                # a loader's batch; copies within one forward (per layer) are still repeats.
                same_round = False
            held = (
                site or UNKNOWN,
                finding,
                same_round,
                key,
                "MP011",
                arrival_sid,
                None if origin is None else (rounds, origin),
            )
            self._repeats_since_step.append(held)
        else:
            self.emit("MP011", site, **finding)
        return True
    if entry is None and self.devices.device_of(t) == "cpu":
        # New data from the host in this iteration (a loader's batch). Random data drawn in the script is new
        # data for all but the stand-in it was computed from: noise drawn for a stand-in (`clean +
        # torch.randn_like(clean)`) is what a loader's batch gets each step, no other batch.
        origin = self.provenance.drawn_from(t)
        if origin is None:
            self._fresh_host_round = rounds
        elif self._fresh_drawn[0] == rounds:
            self._fresh_drawn[1].add(origin)
        else:
            self._fresh_drawn = (rounds, {origin})
    self._moves[key] = [StorageRef(t), site or UNKNOWN, step, mark, rounds]
    if len(self._moves) > self._purge_at:
        self._purge()
    return False


def judge_repeats_after_training(self: Checker, *, step_ended: bool) -> None:
    """Report the repeats held since the last optimizer step (`_check_repeat`). At a step they were made inside
        the training loop: a copy of data moved in the iteration before is reported (a constant moved every step);
        two copies within this one iteration are reported once the same line has repeated so in an earlier
        iteration too, as per-step waste does on every step (an evaluation made twice between two training phases,
        the validation set moved for each, is a copy once, not per step). At the end of the run no step followed
        them, so they were made after training (a final evaluation): a repeat made once there costs once, and only a
        line that repeated two times or more (an evaluation loop moving the same data twice per batch) is
        reported, and so is one tensor moved to one device three times or more (three metrics of an evaluation, each
    moving the same targets). MP005's round trips made after training are held the same way (round_trip.py): a round trip at the
        end of a run (a copy brought back once to check it against its original) costs once. After training, the
        count is of one tensor's repeats: two models evaluated on the same batches
        move each batch twice, once per model, a copy once per batch however many batches there are."""
    held, self._repeats_since_step = self._repeats_since_step, []
    times: dict[tuple[str, int], int] = {}
    per_data: dict[tuple[str, int, tuple[Any, ...]], int] = {}
    per_tensor: dict[tuple[Any, ...], int] = {}  # one tensor's repeats at any line: three metrics each moving it
    for site, _, _, key, *_ in held:
        times[(site.path, site.line)] = times.get((site.path, site.line), 0) + 1
        per_data[(site.path, site.line, key)] = per_data.get((site.path, site.line, key), 0) + 1
        per_tensor[key] = per_tensor.get(key, 0) + 1
    seen = self._repeated_lines
    picked, self._row_picked = self._row_picked, set()
    fresh_drawn_round, fresh_drawn = self._fresh_drawn
    for site, finding, same_round, key, code, arrival_sid, stand_in in held:
        if (
            code == "MP011"
            and step_ended
            and not same_round
            and stand_in is not None
            and stand_in[0] != self._fresh_host_round
            and not (stand_in[0] == fresh_drawn_round and fresh_drawn - {stand_in[1]})
            and arrival_sid not in picked
        ):
            # In a training loop whose iteration brought no new data from the host, random data drawn on the host
            # and copied again in every step, outside the model, and used whole: a script's fixed stand-in batch,
            # which stands for the loader's new batch of a real run (its copy is needed there). Beside new data (a
            # loader's batches) it is a constant copied every step; indexed after the copy (a whole data set
            # copied to take a batch from it) it is waste in any run: both reported, as is any constant.
            continue
        line = (site.path, site.line)
        again = times[line] if step_ended else max(per_data[(site.path, site.line, key)], per_tensor[key])
        if (step_ended and (not same_round or line in seen)) or again >= 2:
            self.emit(code, site, **finding)
    if step_ended and len(seen) < PURGE_AT:
        seen.update(times)


def _check_recomputed_move(self: Checker, t: Any, dst_dev: str, site: Site | None, module: str | None) -> None:
    """MP011 on a move made again by activation checkpointing's recomputation (in backward) of the same
    unchanged data the forward moved at that line in this step: the checkpointed function moves its own input
    (`checkpoint(stage, h)` with `stage.forward` starting `x.to(dev)`), so the copy is paid twice a step. A hop
    between devices inside the checkpointed function moves a recomputed tensor, new data: not this."""
    try:
        storage = t.untyped_storage()
    except Exception:
        return
    entry = self._moves.get(move_key(t, storage, dst_dev))
    if (
        entry is None
        or entry[0].ref() is not storage
        or entry[0].version is None
        or entry[0].version != version_of(t)
        or entry[2] != self.ledger.step_index
        or site is None
        or site.context  # a library's own move, which the user cannot change
    ):
        return
    self.emit(
        "MP011",
        site,
        f"repeated transfer: activation checkpointing recomputes this line in backward and moves the same "
        f"unchanged data ({tensor_words(t)}) to {dst_dev} again (first at {entry[1]}, in forward): the "
        f"checkpointed function moves its own input, so the copy is paid twice a step",
        devices=(self.devices.device_of(t), dst_dev),
        modules=(module,) if module else (),
        suggestion=f"move the input to {dst_dev} before `checkpoint(...)` (`checkpoint(fn, x.to({dst_dev!r}))`), "
        "so the checkpointed function starts where its data is and saves the moved copy",
        extra={"first_site": str(entry[1]), "scope": "recompute"},
    )


def _check_host_parameter(self: Checker, p: Any, dst_dev: str, site: Site | None, module: str | None) -> None:
    """MP011 on a parameter of the model kept on the host and copied to a GPU inside a forward pass, at the
    same line, in two steps (`self.tokens["cls"].to(x.device)` of an nn.ParameterDict left out of the
    placement): every step copies it over, its gradient comes back to the host, and the optimizer steps it
    there. Any size: the placement is the mistake, not the bytes. A weight on another GPU copied for a tied
    layer is the price of that split (provenance.py), and only a host parameter is asked about here."""
    if site is None or site.context:
        return  # a library's own move (an offload hook): by design
    key = (id(p), dst_dev, site)
    step = self.ledger.step_index
    first = self._host_params.get(key)
    if first is None:
        if len(self._host_params) < PURGE_AT:
            self._host_params[key] = step
        return
    if first == step or first < 0:
        return  # the same step, or reported already
    self._host_params[key] = -1
    name = _parameter_name(self, p)
    self.emit(
        "MP011",
        site,
        f"repeated transfer: the parameter {name}({tensor_words(p)}) lives on the host and this line copies it "
        f"to {dst_dev} in every forward pass: its gradient goes back to the host in every backward, and the "
        f"optimizer steps it there",
        devices=("cpu", dst_dev),
        modules=(module,) if module else (),
        suggestion=f"place the parameter on {dst_dev} with the rest of its module (include it, or the "
        "ParameterDict / ParameterList that holds it, in the model's placement), and drop the move",
        extra={"scope": "parameter"},
    )


def _parameter_name(self: Checker, p: Any) -> str:
    """'`model.tokens.cls` ' for a parameter of a root model seen so far, else ''."""
    namer = self.namer
    for root in namer.roots() if namer is not None else ():
        for name, q in root.named_parameters(remove_duplicate=False):
            if q is p:
                return f"`{namer(root)}.{name}` "  # type: ignore[misc]
    return ""


def _check_const_copy(
    self: Checker, t: Any, src_dev: str, dst_dev: str, site: Site | None, module: str | None, nbytes: int
) -> None:
    """MP011 on a fresh tensor computed only from buffers and constants (provenance.py), moved at
    the same line a second time. Its sources never change, so it can be made on the destination
    from sources kept there (or is the same bytes each time, when the Python numbers that shaped it
    are the same); the copy is the waste, whatever the bytes. Only at the user's own line
    (a library's code, which the user cannot change, is left alone). A peer copy from another GPU counts from
    GPU_CONST_COPY_MIN_BYTES when it is made fresh each call, another storage each time (a relative-position bucket
    table computed on the first stage and sent to the second each forward: the copy costs what computing it again
    there would); a tensor kept (a buffer), from REPEAT_MIN_BYTES (one copy kept there would do)."""
    if site is None or site.context or not self.provenance.is_const(t):
        return
    key = (site, dst_dev)
    mark = self._run_mark()
    try:
        sid = id(t.untyped_storage())
    except Exception:  # no storage: not followed
        return
    seen, last, last_sid = self._const_copies.get(key, (0, mark, sid))
    seen += 1
    if len(self._const_copies) < PURGE_AT or key in self._const_copies:
        self._const_copies[key] = (seen, mark, sid)
    if seen < 2 or not recurs(last, mark, in_library=False):  # setup, not the model's work (recurrence.py)
        return
    if src_dev not in NOT_GPU and nbytes < GPU_CONST_COPY_MIN_BYTES and sid != last_sid:
        # Made fresh on each call (another storage each time) and copied from a GPU: a small peer copy costs about
        # what making it again there would (thresholds.py). A tensor kept (a buffer, the same storage each time):
        # one copy kept on the other GPU would do.
        return
    if last[:3] == mark[:3]:
        # Two copies in one forward pass (`torch.zeros(s).cuda(), torch.zeros(s).cuda()`): reported from the
        # next pass on, once the pass has shown what else is wrong at this line (below).
        return
    if any(k[0] == "MP004" and k[1] == site.path and k[2] == site.line for k in self._by_key):
        return  # `torch.zeros(shape).cuda()` in a stage on another GPU: MP004's fix (make it there) is this one's
    self.emit(
        "MP011",
        site,
        f"repeated transfer: on every call this line makes a fresh tensor ({tensor_words(t)}) computed only "
        f"from buffers and constants, which never change, on {src_dev} and copies it to {dst_dev}",
        devices=(src_dev, dst_dev),
        modules=(module,) if module else (),
        suggestion=f"make it on {dst_dev}: keep its buffer there (move the buffer once, or register the "
        f"result as a buffer on {dst_dev}), or create the constant there with `device='{dst_dev}'`",
        extra={"scope": "provenance"},
    )


def _refresh_provenance(self: Checker) -> None:
    """List the root models' buffers for provenance when the roots or their placement changed."""
    namer = self.namer
    if namer is not None:
        self.provenance.refresh(namer.roots(), self.placement_epoch)
