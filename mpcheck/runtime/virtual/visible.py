"""CUDA_VISIBLE_DEVICES on virtual GPUs. CUDA reads the variable once, when the program first asks for a
GPU, and from then on numbers the visible ones from cuda:0: with `CUDA_VISIBLE_DEVICES=0,2` on a machine
of 4 GPUs the process has cuda:0 and cuda:1 only, and a `.to("cuda:2")` fails ('invalid device ordinal').
A program that sets it at its top (`os.environ["CUDA_VISIBLE_DEVICES"] = "0,2"`) sees on virtual GPUs what it
would see on `--gpus` real ones. The value mpcheck itself was started with is the real machine's (a shared
server's `0,1`), not the virtual one's, and is left alone: `--gpus` says what the virtual machine has."""

from __future__ import annotations


def visible_count(spec: str, machine: int) -> int | None:
    """How many of `machine` GPUs a CUDA_VISIBLE_DEVICES value leaves visible, or None where it cannot be
    told here (GPU UUIDs, MIG names). As CUDA does, the list is read up to its first entry that names no GPU
    of the machine (out of range, negative, repeated); an empty value hides every GPU."""
    count, seen = 0, set()
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            break
        if not entry.lstrip("-").isdigit():
            return None
        index = int(entry)
        if not 0 <= index < machine or index in seen:
            break
        seen.add(index)
        count += 1
    return count
