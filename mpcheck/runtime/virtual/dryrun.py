"""`mpcheck.dryrun`: run model-parallel code on N virtual GPUs, on a machine with none.

    with mpcheck.dryrun(gpus=4, backing="meta", device_memory="80GiB", link="nvlink") as dr:
        train_one_step()
    dr.findings, dr.memory, dr.ledger

The virtual GPUs (devices.py) are entered first; the debug mode's session, with
the same checks and rule codes, runs on top of them with `devices=` the virtual
GPUs, so the checks see virtual devices. Default `on_mismatch="move"`: one run
lists every mismatch, each at the user's line.

What is emulated, and how:
- torch.cuda: is_available, device_count, current_device, set_device, device(...),
  synchronize, memory_allocated / max_memory_allocated / mem_get_info / memory_stats
  (from the live tensors on each virtual GPU), get_device_properties (total_memory =
  --device-memory), streams and events (always complete), seeds and RNG state (the CPU's);
  torch.accelerator likewise; the legacy torch.cuda.FloatTensor(...) constructors make their tensors on the
  current GPU. CUDA_VISIBLE_DEVICES set by the program hides GPUs and renumbers the rest
  (visible.py). torch.backends.cudnn.is_acceptable says no (cuDNN never runs here; a CUDA
  build of torch, even on a machine without a GPU, would send nn.LSTM/GRU.to('cuda:k') to a CUDA-only op).
- autocast("cuda"): on a CPU build its flag is set but CPU and meta tensors never reach the
  CUDA autocast kernels, so the dry run casts inputs itself, at the Python call, following
  CUDA autocast's lists: matmul-like ops (linear, matmul, bmm, conv, SDPA, ...) in the
  autocast dtype, reductions/normalisations/losses (softmax, layer_norm, cross_entropy, ...)
  in float32. Ops autocast promotes (cat, ...) see the dtypes they are given.
- Tensor.type(): the type name of a tensor on a virtual GPU is a CUDA one ('torch.cuda.FloatTensor');
  .type(T) with a tensor type, its name or a dtype converts as PyTorch does (a CUDA type: onto the
  tensor's own GPU or the current one; a CPU type: onto the CPU). Module.to/.cuda/.cpu move a module
  between virtual GPUs, its gradients too.
- torch.nn.parallel.comm (scatter, gather, broadcast, reduce_add and their coalesced forms, DataParallel's
  CUDA collectives, under replicate / scatter / gather called by hand) is the copies it makes (Tensor.to),
  seen by the checks and the ledger. torch.accelerator.device_index makes a virtual GPU current.
- DataParallel runs its module once on device_ids[0] (no replicas); DDP runs on a gloo group with
  --backing cpu: one process, or N of them (`mpcheck dryrun --nproc N`, or torchrun around it).
  NCCL runs as gloo (listed under "limit"); a program written for torchrun (the env://
  rendezvous, RANK / LOCAL_RANK / WORLD_SIZE) started without it runs as its only process.
- DataLoader (workers, pin_memory) and pinned factories: pinning means nothing without a GPU.
- torch.save records each storage's virtual GPU ("cuda:1") in the checkpoint, and torch.load restores it
  there unless map_location says otherwise (a device, an integer: CUDA's, a dict of locations, a callable,
  `storage.cuda(k)` / `storage.to(device=...)` in it), tensors in containers and pickled modules alike
  (patches/data.py).
- Threads the program starts (threading.Thread, ThreadPoolExecutor tasks: transformers' loading workers)
  run under the same modes (capture/threads.py); each thread has its own current device, as on CUDA.
- With --backing meta, attention (F.scaled_dot_product_attention) uses the flash kernel's meta
  function, so its activation estimate is a GPU's (log-sum-exp), not the math path's T x T matrix.
- Memory: every storage an aten op makes on a virtual GPU is counted while it lives, backward's and
  the optimizer's temporaries too, at the bytes the CUDA caching allocator counts (allocations.py,
  cuda_allocator.py); the estimate is each device's peak of that sum (memory.py).

Limits (each stops the program with a message naming the line, never a hang or an abort):
- custom CUDA kernels and extensions (a kernel that refuses CPU/meta tensors), CUDA graphs,
  any torch.cuda function not listed above;
- NCCL's collectives themselves; DDP with --backing meta;
- torch.distributed.pipelining's schedules (their stages exchange activations between processes);
- with --backing meta, Python that needs a value: .item(), .tolist(), bool(t), int(t),
  .numpy(), f-string formatting, data-dependent shapes (nonzero, masked_select, ...):
  use --backing cpu;
- TorchScript: torch.jit.script / trace give back the eager module or function (listed as a limit;
  PyTorch's own calls, such as forward-mode AD's decompositions, get the real ones);
- jagged nested tensors: their inner tensors are not labelled (findings on them may be false);
- event timing (Event.elapsed_time returns 0.0 and is listed under "limit" in the report):
  streams do not overlap, nothing is timed;
- not seen: Python code autograd runs in backward other than custom Function backward and
  checkpoint recomputation (e.g. tensor hooks); a thread started before
  the dry run began (threads started during it, and thread pool tasks submitted during it, run on the
  virtual GPUs: capture/threads.py).
- sparse tensor types (Tensor.type('torch.cuda.sparse.FloatTensor')) on virtual GPUs;
- a crash on anything else only real CUDA has (a CUDA binding a CPU build lacks, a custom op for CUDA only, the legacy
  torch.cuda.FloatStorage(...) storages): the traceback is the program's, and the report
  lists it as a limit at its line;
- an integer device (`torch.device(0)`, `.to(0)`, `device=1`, `Module.to(1)`, `.cuda(0)`) is CUDA's,
  as on real GPUs (a CPU build alone refuses it: "Cannot access accelerator device").
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from mpcheck.runtime.checks.face import Face
from mpcheck.runtime.virtual.links import format_bytes, parse_bytes

if TYPE_CHECKING:
    from mpcheck.runtime.virtual.devices import VirtualGPUs

STOPPED_NOTE = (
    "the program stopped before its end (see `stopped`): the findings, transfers and memory estimate cover "
    "only what ran until then"
)
NEEDS_CUDA_LIMIT = (
    "the program stopped on something only real CUDA has (PyTorch's CUDA library, a CUDA kernel or binding), "
    "which virtual GPUs do not emulate: a limit of the dry run, not necessarily a bug in the program"
)


class dryrun(Face):
    """Virtual GPUs plus the runtime checks, and a report with memory and transfer estimates.

    gpus: how many virtual CUDA devices (cuda:0..gpus-1).
    backing: "cpu" (real values; small models; losses bit-identical to a CPU run) or
        "meta" (shapes only; any size; Python code that needs a value stops with a clear message).
    device_memory: each virtual GPU's memory ("80GiB", "141GB", or bytes), for the fit check.
    link: "nvlink", "pcie4", "pcie5" or a bandwidth in GB/s: the transfer time model (links.py).
    on_mismatch: "move" (default: record and go on), "warn", or "raise".
    report: "stderr" to print the report on exit, None for none.
    html: a file for the HTML report, written on exit (also `write_html(path)` afterwards).
    recheck_every: a module call like one already checked clean (same module, devices and dtypes of
        its tensor inputs, training flag, grad mode, autocast) runs without the per-call checks; every
        recheck_every-th step checks everything again. 0: check every call. None: the environment's
        MPCHECK_RECHECK_EVERY, else 100.
    """

    def __init__(
        self,
        gpus: int = 2,
        *,
        backing: str = "cpu",
        device_memory: str | int = "80GiB",
        link: str | float = "nvlink",
        model: Any = None,
        on_mismatch: str = "move",
        select: Iterable[str] | None = None,
        report: str | None = "stderr",
        output_format: str = "text",
        trace: str | None = None,
        html: str | None = None,
        recheck_every: int | None = None,
    ) -> None:
        from mpcheck.runtime.virtual.links import parse_link

        super().__init__(
            model,
            on_mismatch=on_mismatch,
            select=select,
            report=report,
            output_format=output_format,
            trace=trace,
            html=html,
            recheck_every=recheck_every,
        )
        if output_format not in ("text", "json"):
            raise ValueError(f"output_format must be 'text' or 'json', not {output_format!r}")
        self.n = gpus
        self.backing = backing
        self.device_memory = parse_bytes(device_memory)
        self.link = parse_link(link)
        self.gpus: VirtualGPUs | None = None
        self.memory: dict[str, dict[str, Any]] = {}
        self.stopped: str | None = None

    # -- results ------------------------------------------------------------------------
    @property
    def limits(self) -> list[tuple[str, str]]:
        return list(self.gpus.limits) if self.gpus else []

    # -- context manager --------------------------------------------------------------------
    def __enter__(self) -> dryrun:
        from mpcheck.runtime.capture.session import Session
        from mpcheck.runtime.virtual.devices import VirtualGPUs

        gpus = self.gpus = VirtualGPUs(self.n, backing=self.backing, device_memory=self.device_memory, link=self.link)
        gpus.__enter__()
        try:
            self._start_session(Session, devices=gpus)
            from torch.overrides import _get_current_function_mode_stack

            gpus.mode_stack = list(_get_current_function_mode_stack())
            threads = self._started().threads
            if threads is not None:
                threads.on_error = self._thread_stopped
                threads.before_first.append(gpus.per_thread)
                gpus.memory.threads = threads
        except BaseException:
            gpus.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        session, gpus = self._started(), self.gpus
        assert gpus is not None  # entered with the session
        try:
            session.stop()
        finally:
            gpus.__exit__(exc_type, exc, tb)
        self.memory = gpus.memory.estimate()
        if gpus.visible_note is not None and gpus.visible_note not in session.notes:
            session.notes.append(gpus.visible_note)
        session.checker.ledger.memory = {}  # the estimate replaces the debug mode's plain counts
        if exc is not None and not isinstance(exc, (SystemExit, GeneratorExit)):
            self.stop_on(exc)
        self._write_on_exit()
        return False

    def stop_on(self, exc: BaseException) -> None:
        """The program stopped on `exc` (a dry-run limit or its own crash): the report says where and what,
        and that its findings, transfers and memory cover only what ran before."""
        from mpcheck.runtime.virtual.errors import (
            DryRunLimitError,
            VirtualDeviceError,
            crash_site,
            needs_real_cuda,
            stop_message,
        )

        self.stopped = stop_message(exc)
        if self.session is not None:
            if STOPPED_NOTE not in self.session.notes:
                self.session.notes.append(STOPPED_NOTE)
            self.session.checker.on_program_stopped(exc)
        if (
            self.gpus is not None
            and not isinstance(exc, (DryRunLimitError, VirtualDeviceError))
            and needs_real_cuda(exc)
        ):
            # Not the program's bug, as far as the dry run can tell: a CPU build lacks what it asked for.
            # (A VirtualDeviceError is what PyTorch would raise on real GPUs: the program's bug.)
            self.gpus.note_limit(NEEDS_CUDA_LIMIT, site=crash_site(exc) or "<unknown line>")

    def _thread_stopped(self, exc: BaseException) -> None:
        """An exception ended a thread of the program (or a thread pool's task). The program goes on, as under
        python (a thread's traceback is printed, a task's exception waits in its future); a dry-run limit, or
        something only real CUDA has, is listed as a limit at its line, as it would be in the main thread."""
        from mpcheck.runtime.virtual.errors import DryRunLimitError, VirtualDeviceError, crash_site, needs_real_cuda

        if self.gpus is None:
            return
        site = crash_site(exc) or "<unknown line>"
        if isinstance(exc, DryRunLimitError):
            text = str(exc)  # "path:line: what is beyond the dry run: why"
            self.gpus.note_limit("in a thread: " + text.removeprefix(site + ": "), site=site)
        elif needs_real_cuda(exc) and not isinstance(exc, VirtualDeviceError):
            self.gpus.note_limit(NEEDS_CUDA_LIMIT, site=site)

    # -- the report ---------------------------------------------------------------------------
    def header(self) -> dict[str, Any]:
        return {
            "gpus": self.n,
            "backing": self.backing,
            "device_memory": self.device_memory,
            "link": self.link.as_dict(),
        }

    def report_dict(self) -> dict[str, Any]:
        from mpcheck.runtime.checks.report import report_dict

        d = report_dict(self._started())
        d["memory"] = self.memory
        d["dryrun"] = self.header()
        d["limits"] = [{"site": s, "message": m} for s, m in self.limits]
        d["stopped"] = self.stopped
        return d

    def render_text(self, *, color: bool = False) -> str:
        from mpcheck.report.colour import Palette
        from mpcheck.runtime.checks.report import render_text

        p = Palette(color)
        body = render_text(self._started(), color=color)
        first, _, rest = body.partition("\n")
        link = self.link
        lines = [
            p("bold", "mpcheck dry run")
            + f": {self.n} virtual GPU{'s' if self.n > 1 else ''}, {self.backing} backing, "
            f"{format_bytes(self.device_memory)} each, link {link.name} "
            f"({link.gb_per_s:g} GB/s + {link.latency_us:g} us per copy; transfer times below are estimates)",
            rest.rstrip("\n"),
            "",
            p("bold", "Memory per virtual GPU")
            + " (estimate: the peak of allocated memory, split into what was live then; activations"
            " include temporaries and cuBLAS workspaces)",
            f"  {'device':<8}{'params':>12}{'grads':>12}{'optimizer':>12}{'activations':>13}{'total':>12}"
            f"{'capacity':>12}  fits",
        ]
        for dev, m in self.memory.items():
            if m["total"] == 0 and m["peak_allocated"] == 0:
                continue
            if m["fits"]:
                fits = p("green", "yes")
            else:
                fits = p("red", f"NO: {format_bytes(m['total'] - m['capacity'])} over")
            lines.append(
                f"  {dev:<8}{format_bytes(m['params']):>12}{format_bytes(m['grads']):>12}"
                f"{format_bytes(m['optimizer_state']):>12}{format_bytes(m['activations']):>13}"
                f"{format_bytes(m['total']):>12}{format_bytes(m['capacity']):>12}  {fits}"
            )
        if all(m["total"] == 0 and m["peak_allocated"] == 0 for m in self.memory.values()):
            lines.append("  (nothing was placed on a virtual GPU)")
        for site, text in self.limits:
            lines.append(p("yellow", f"limit: {site}: {text}"))
        if self.stopped:
            lines.append(p("red", f"stopped: {self.stopped}"))
        return "\n".join(lines) + "\n"

    # The report's parts: the session's, with the memory, the link model and the limits added.
    def _report_dict(self) -> dict[str, Any]:
        return self.report_dict()

    def _render_text(self, *, color: bool) -> str:
        return self.render_text(color=color)

    def _html_title(self) -> str:
        return f"mpcheck dry run: {self.n} virtual GPU{'s' if self.n > 1 else ''}"

    def _html_subtitle(self) -> str:
        link = self.link
        return (
            f"{self.backing} backing, {format_bytes(self.device_memory)} each; memory is the dry run's estimate, "
            f"transfer times the link model's ({link.name}, {link.gb_per_s:g} GB/s + {link.latency_us:g} us per copy)"
        )

    def _capacities(self) -> dict[str, int]:
        return {}  # in the memory estimate

    def _trace_data(self) -> dict[str, Any]:
        """The session's Chrome trace, its note saying the times are the link model's."""
        from mpcheck.runtime.checks.report import chrome_trace

        data = chrome_trace(self._started())
        data["otherData"] = {
            "note": "dry run on virtual GPUs: ts = host time the copy was made; dur = the link model's "
            f"estimate ({self.link.name}, {self.link.gb_per_s:g} GB/s + {self.link.latency_us:g} us)"
        }
        return data
