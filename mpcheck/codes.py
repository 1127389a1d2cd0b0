"""Every code mpcheck reports, in one table.

A code's identity (its kebab name, severity, one-line summary, the faces that
report it, whether it stops the program at run time) lives here and nowhere
else: the lint `Rule` classes, the runtime checking core, the lint pipeline's
MP000 and the rule catalogue read it from this table, and the tests compare
the rule documents (rules/MPNNN-name.md) and the README's rule table with it.

Standard library only: the CLI, the runtime faces and the cache's fast path
import this without libcst or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

LINT, RUN, DRYRUN = "lint", "run", "dryrun"
FACES = (LINT, RUN, DRYRUN)
SEVERITIES = ("error", "warning")
_EVERY_FACE = (LINT, RUN, DRYRUN)  # the checks the runtime core shares with the linter


@dataclass(frozen=True)
class Code:
    code: str  # "MP002"
    name: str  # kebab-case, as in the doc's file name: split-model-in-data-parallel
    severity: str  # "error" or "warning", the same on every face (at run time, the cause of a call that
    # fails is an error whatever the default: runtime/checks/findings.emit)
    summary: str  # one line: `mpcheck rule --all`, SARIF, the doc's first paragraph agrees with it
    faces: tuple[str, ...]  # which of lint / run / dryrun report it
    fatal: bool = False  # at run time: follows on_mismatch (raise by default); else only recorded

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"{self.code}: severity {self.severity!r} not in {SEVERITIES}")
        if not self.faces or any(f not in FACES for f in self.faces):
            raise ValueError(f"{self.code}: faces {self.faces!r} not in {FACES}")
        if self.fatal and RUN not in self.faces:
            raise ValueError(f"{self.code}: fatal at run time but not reported at run time")


CODES: tuple[Code, ...] = (
    Code(
        "MP000",
        "syntax-error",
        "error",
        "The file could not be checked: it does not parse, it is not UTF-8, or it cannot be read.",
        (LINT,),
    ),
    Code(
        "MP001",
        "missing-transfer",
        "error",
        "A tensor on one device reaches a module, parameter or op on another device with no .to() in between.",
        _EVERY_FACE,
        fatal=True,
    ),
    Code(
        "MP002",
        "split-model-in-data-parallel",
        "error",
        "A model split over several GPUs is wrapped in DataParallel, or in DistributedDataParallel with "
        "device_ids/output_device.",
        _EVERY_FACE,
        fatal=True,
    ),
    Code(
        "MP003",
        "parallel-primitive-misuse",
        "error",
        "torch.nn.parallel.scatter/gather/replicate/parallel_apply (or torch.cuda.comm) used on a split model "
        "or to feed its stages.",
        _EVERY_FACE,
    ),
    Code(
        "MP004",
        "set-device-conflict",
        "warning",
        "After torch.cuda.set_device / `with torch.cuda.device`, an index-less `.cuda()` or 'cuda' in "
        "split-model code lands on the current device.",
        # Run time: a tensor made on the current device inside a stage on another GPU, or a stage placed there,
        # reported where it was made when the call it reaches fails (then fatal, passed per finding), and a
        # split collapsed onto one GPU by set_device (recorded: the program runs, on one GPU).
        _EVERY_FACE,
    ),
    Code(
        "MP005",
        "round-trip-transfer",
        "warning",
        "A tensor is moved to another device and straight back, or from one GPU through the CPU to another, "
        "with no work done in between.",
        _EVERY_FACE,
    ),
    Code(
        "MP006",
        "transfer-per-layer",
        "warning",
        "Layers alternate between devices, so the activations cross devices more often than once per stage boundary.",
        _EVERY_FACE,
    ),
    # An error: the split is silently undone and the memory problem it solved comes back. Not fatal
    # at run time all the same: the collapsed model still runs (on one device), so the program is
    # left to go on and the finding is reported at the end instead of stopping it.
    Code(
        "MP007",
        "collapse-split-model",
        "error",
        "`.cuda()` or `.to(device)` on a model split over several devices moves every stage onto one device.",
        _EVERY_FACE,
    ),
    Code(
        "MP008",
        "loss-device-mismatch",
        "error",
        "A loss or metric gets its outputs and its targets (or class weights) on different devices.",
        _EVERY_FACE,
        fatal=True,
    ),
    # Which device indices exist is known where the program runs (device_count(), CUDA_VISIBLE_DEVICES,
    # --gpus); the linter says it only of indices computed from torch.cuda.device_count(), under each GPU
    # count it assumes ([tool.mpcheck] gpus). Fatal: CUDA raises "invalid device ordinal" right after.
    Code(
        "MP009",
        "nonexistent-device",
        "error",
        "A tensor or module is placed on a CUDA device index that this machine does not have (cuda:2 with 2 GPUs).",
        _EVERY_FACE,
        fatal=True,
    ),
    Code(
        "MP011",
        "repeated-transfer",
        "warning",
        "The same unchanging tensor (buffer, parameter, constant, loop-invariant value) is copied to a device "
        "on every call or iteration.",
        _EVERY_FACE,
    ),
    # Run time only: whether a copy kept a tensor's strides, and a view refused them, is known only as it runs.
    Code(
        "MP012",
        "view-after-transfer",
        "error",
        "A non-contiguous tensor (permuted, transposed) is moved to another device and `.view()`-ed there: the copy "
        "keeps its strides and the view fails.",
        (RUN, DRYRUN),
        fatal=True,
    ),
    # Run time only: which GPUs a process owns is known only from its launcher (RANK, LOCAL_RANK, the GPUs).
    Code(
        "MP013",
        "foreign-rank-device",
        "error",
        "A process of a multi-process job (torchrun) places a tensor or a stage on a GPU that another local rank owns.",
        (RUN, DRYRUN),
    ),
    Code(
        "MP014",
        "costly-transfer-direction",
        "warning",
        "The large side of a loss is moved to the small side's GPU (logits to the labels') where moving the "
        "small one (the labels) would copy far less.",
        _EVERY_FACE,
    ),
    # Lint only: at run time torch itself raises at that line (TypeError, "Invalid device string"), and the
    # run-time faces report where the program stopped.
    Code(
        "MP015",
        "not-a-device",
        "error",
        "A device argument torch refuses: `torch.cuda.device(i)` (a context manager, not a device) or a CUDA "
        "string it cannot read (`'gpu'`, `'cuda1'`).",
        (LINT,),
    ),
    # The run-time faces see a broadcast view's strides at the move; a repeat or a reduction after the
    # move is a matter of the code's order, which only the linter reads.
    Code(
        "MP016",
        "oversized-transfer",
        "warning",
        "A tensor moved at a larger size than its data needs: enlarged (`.expand()`, `.repeat()`) before the "
        "move instead of after it, or moved whole only to be reduced to one value (`.sum()`, `.all()`).",
        _EVERY_FACE,
    ),
    # Lint only: which device a loop meant each pass for is in its code (the loop over devices); at run
    # time the modules are simply where they are.
    Code(
        "MP017",
        "loop-ignores-device",
        "warning",
        "A loop over several devices builds modules but never uses its device, a list of devices is made by a "
        "loop that never uses its index (or picks the same device for every index), or hooks made in a loop read "
        "its device only after it, or copies made for each device are cached under `device.type`, or a placing loop "
        "zips more modules than devices: the stages all end on one device (or one copy, or unplaced) instead of one "
        "set on each; or a cache that every caller shares (a mutable default argument, a class attribute, a "
        "module-level dict) is filled for modules on two GPUs under a key that names no device, so one of them reads "
        "the other's copy.",
        (LINT,),
    ),
    # Lint only: at run time nothing happens at that line, which is the bug.
    Code(
        "MP018",
        "lazy-move",
        "error",
        "A move that never takes effect: `.to()` / `.cuda()` written inside a `map(...)` or a generator expression "
        "whose result is dropped (Python 3 never runs it), a tensor's own `.to()` dropped in a loop over a "
        "module's parameters, or the placed copy a function returns dropped: nothing moves.",
        (LINT,),
    ),
    Code(
        "MP019",
        "made-on-host",
        "warning",
        "A tensor made on the host from a shape alone (`torch.randn(shape)`, `torch.zeros(n)`) and moved to a GPU "
        "at once, in code that runs every step: made there with `device=`, it needs no copy.",
        _EVERY_FACE,
    ),
    # At run time only the reads of elements themselves (views of one GPU tensor) and `torch.tensor(items)`:
    # Python's `max(t)` reads comparisons, tensors of their own (runtime/checks/element_reads.py).
    Code(
        "MP020",
        "host-sync-per-element",
        "warning",
        "Python reads a GPU tensor's elements on the host one at a time (`max(t)`, `sorted(t)`, "
        "`[v.item() for v in t]`, `torch.tensor(losses)`): one wait for the GPU per element, where `t.max()`, "
        "`t.tolist()` or `torch.stack(losses)` waits once or not at all.",
        _EVERY_FACE,
    ),
    # Mostly at run time: which copies were gathered, from where, and how big they are is known then. The
    # linter sees one form: a loop over a tensor's rows that moves each row to another device.
    Code(
        "MP021",
        "per-item-transfer",
        "warning",
        "Many small tensors are moved one by one from one device to another and then stacked there "
        "(`torch.stack([x.to(dev) for x in xs])`, a Dataset moving each sample to the GPU): one copy per item, "
        "where stacking first and moving once makes one.",
        _EVERY_FACE,
    ),
    # Lint only: at run time the copy is an ordinary tensor; what is wrong with it shows later, far away.
    Code(
        "MP022",
        "parameter-moved-after-wrapping",
        "error",
        "`nn.Parameter(t).to(dev)`: moving a parameter to another device returns a plain, non-leaf tensor, which "
        "no module registers and no optimizer accepts; move the data, then wrap it.",
        (LINT,),
    ),
    # Lint only: at run time a dict lookup that misses is ordinary Python, and the module just lands elsewhere.
    Code(
        "MP023",
        "device-map-key-matches-nothing",
        "warning",
        "A key of a hand-written device map names nothing the code looks up, while a name it does look up, much "
        "like that key, is missing and falls back to the default device: that part lands on the wrong device.",
        (LINT,),
    ),
    # Lint only: at run time the default is an ordinary value, and the part just lands on the old device.
    Code(
        "MP024",
        "default-keeps-old-device",
        "warning",
        "A parameter's default reads a module's device setting that a function changes later (`global`): Python "
        "evaluated the default once, at the `def`, so a call that leaves the argument out still gets the old device.",
        (LINT,),
    ),
    Code(
        "MP025",
        "string-compared-with-number",
        "warning",
        "A test that decides devices compares a string read from the environment or the command line with a "
        'number (`os.environ.get("MP") == 1`), or reads one as a flag (`if os.environ.get("PROFILE", "0"):`): a '
        'string never equals a number, and "0" is true, so the same branch runs every time.',
        (LINT,),
    ),
    Code(
        "MP026",
        "devices-generator-consumed",
        "warning",
        "A generator of devices is read to its end (a log line, a `list()`) before the placement reads it: the "
        "placement gets nothing and places nothing.",
        (LINT,),
    ),
    Code(
        "MP027",
        "placement-closure-late-binding",
        "warning",
        "A function made in a loop and kept for later (a placement policy, a hook) places on the loop's device "
        "variable: it reads the variable when it runs, after the loop, so every one places on the last device.",
        (LINT,),
    ),
    Code(
        "MP028",
        "copied-every-pass-read-periodically",
        "warning",
        "A tensor is copied off its GPU on every pass of a loop, but only a branch taken every N-th pass "
        "(`if step % 10 == 0:`) reads the copy: the other passes' copies cross the link for nothing.",
        (LINT,),
    ),
    Code(
        "MP029",
        "repeated-list-in-device-plan",
        "warning",
        "`[[]] * n_gpus` repeats one list: what a plan adds to one device's entry (`plan[gpu].append(layer)`) is in "
        "every entry, so every device gets every item.",
        (LINT,),
    ),
    Code(
        "MP030",
        "replaced-part-left-on-host",
        "warning",
        "A part of a split model replaced after the split (a new classifier head) by a module built without a "
        "device: the part it replaces was on a GPU, the new one trains on the CPU.",
        (LINT,),
    ),
    # Mostly at run time: which layers run, and where their weights are as they run, is known then. The linter
    # knows one way: layers a model holds in a plain list, which no `.to()` of it reaches.
    Code(
        "MP031",
        "layer-left-on-host",
        "warning",
        "Layers of a model whose other parts are on GPUs compute on the CPU: the code that placed their siblings "
        "never reached them.",
        (LINT, RUN, DRYRUN),
    ),
    # Only the linter interprets a file under several GPU counts (devices/gpucount.py); a run has one.
    Code(
        "MP032",
        "split-waits-for-one-gpu-more",
        "warning",
        "A test on the GPU count splits the model only with more GPUs than the split uses: with exactly as many "
        "(the usual 2 for 2 stages) every part lands on one GPU and the others idle.",
        (LINT,),
    ),
)

BY_CODE: dict[str, Code] = {c.code: c for c in CODES}
if len(BY_CODE) != len(CODES) or len({c.name for c in CODES}) != len(CODES):
    raise RuntimeError("mpcheck.codes: a code or a name appears twice")


def get(code: str) -> Code:
    """The entry of `code` (KeyError for a code mpcheck does not have)."""
    return BY_CODE[code]


def on_face(face: str) -> tuple[Code, ...]:
    """The codes `face` reports, sorted by code."""
    return tuple(c for c in CODES if face in c.faces)


SYNTAX_ERROR = get("MP000")


# MP011's size threshold, shared by the linter and the run-time checks: a repeated copy smaller
# than this costs about one launch whatever its size (measured on 2x H200: rules/MP011 and the
# README's "Transfer costs" table), so it is not worth a finding. The run time reads
# MPCHECK_REPEAT_MIN_BYTES to change it; the linter stays silent only on copies whose size it can
# read off the code and that are certainly below it.
REPEAT_MIN_BYTES = 64 * 1024


# How many files away from the call that made its devices known a helper is still analysed with
# those devices (main.py -> engine.train -> utils.step -> losses.ce is 3). The device model
# (devices/callers.py) stops there and the lint pipeline (lint/callers.py) runs as many rounds; it
# lives here because the pipeline must not import the device model (a cached run loads no libcst).
CALLER_DEPTH = 3


# A metric (MP008, with the losses): its tensors are predictions and targets, so a mismatch there is fixed
# by moving the targets to the predictions' device. A function is a metric's when a part of its
# snake_case name is one of these (`dice_score`, `compute_accuracy`, `top1_acc`); `score` alone is
# not (attention scores), nor `precision` (mixed precision). Shared by the linter and the run-time checks (which must not import libcst).
METRIC_NAME_PARTS = frozenset(
    {
        "acc",
        "accuracy",
        "metric",
        "metrics",
        "dice",
        "iou",
        "miou",
        "jaccard",
        "f1",
        "recall",
        "auc",
        "psnr",
        "ssim",
        "bleu",
        "top1",
        "top5",
        "topk",
    }
)


def is_metric_function(name: str) -> bool:
    """Is a function of this name a metric's (`dice_score`, `accuracy`, `eval_top1`)?"""
    return any(part in METRIC_NAME_PARTS for part in name.lower().split("_"))


# MP016's factor for a tensor resampled before its move (`F.interpolate(x, scale_factor=4)`, `F.unfold(h, 3)`),
# shared by the linter and the run-time checks: the result must hold at least this many times its input's elements,
# the mirror of a reduction's 1/8 (mpcheck/runtime/checks/reduced_after_move.py SHRINK). A resampling is compute
# the destination would take over; a 2x upsampled image (4 times the data, a skip connection's base image) moved
# between GPUs wastes a fraction of a copy's fixed cost at NVLink speed, below what a warning is for. The linter reads
# a single scale factor as one per dimension of an image (two).
RESAMPLE_MIN_FACTOR = 8

# MP021: the fewest items moved one by one that make a per-item transfer (bench/per_item_transfer.py, one H200,
# host -> GPU: one by one costs x4.0 at 8 x 4 KiB, x1.0 at 256 KiB). Fewer pieces are a pipeline's micro-batches,
# each large, whose copies cost about what one copy of the whole would. Both faces read it.
PER_ITEM_MIN_ITEMS = 8
