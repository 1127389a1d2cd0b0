"""argparse: the values a script runs with when its command line gives none, its defaults.

`p.add_argument("--head-device", default="cuda:1")` ... `args = p.parse_args()` makes `args.head_device`
"cuda:1" as the script runs with no flags, as a config dataclass's field defaults are read
(Expressions._constant_attr). A flag given on the command line may change it, so a finding on it is true of
the script as run with its defaults; an attribute the file assigns (`args.device = ...`) is not read off the
defaults at all (`_constant_attr`'s rule for namespaces).

An index of a GPU or a rank (`--gpu 0`, `--local_rank -1`: a number, or None, under a name that says so)
stays unknown: a launcher gives each process its own, and the default only stands in for it. Two or more GPU
indices of one parser with distinct defaults and no rank among them (`--encoder-gpu 0 --decoder-gpu 1`) are a
placement, which no launcher sets: their defaults are read; so is one GPU index named for a part of the model
(`--ngram-gpu 1`, `--teacher-gpu 1`: a launcher gives a process its GPU, not one for a part). The same holds for GPU indices the script reads from
its environment at its top level (`DECODER_GPU = int(os.environ.get("OCR_DECODER_GPU", 1))`, or a device string:
`os.getenv("K_DEVICE", "cuda:1")`), read as their defaults by `library._environment_get` when they form a placement
(`environment_placement`).

What is known is kept only where argparse's own rules are plain: a default of a known value, `store_true`
and `store_false`, a string default converted by `type=int` / `type=float` / `type=str`, or by a `type=` lambda of
one parameter, its body run on the default (`lambda s: [torch.device(d) for d in s.split(",")]`, a list of devices
given as `cuda:0,cuda:1`). A default given through another `type=` (a function) is not known. `parse_args` with a list the code writes out
(`parse_args([])`) reads the defaults only when that list is empty; `parse_args(argv)` with `argv` None does; a
list naming a sub-command alone (`parse_args(sys.argv[1:] or ["train"])`, `sys.argv[1:]` being no arguments:
Expressions._arguments) reads the parser's defaults, then that command's (`add_subparsers().add_parser("train",
parents=[common])`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mpcheck.devices.values import UNK, Const, DictV, QName, SeqV, Val
from mpcheck.devices.walk import walk

# `type=` callables whose effect on a string default is known.
_CONVERSIONS: dict[str, Any] = {"int": int, "float": float, "str": str, "builtins.int": int, "builtins.float": float}


@dataclass(eq=False)
class ParserV(Val):
    """An argparse.ArgumentParser (or an argument group of one, which adds to it): dest -> default."""

    defaults: dict[str, Val] = field(default_factory=dict)
    # GPU indices held back as a launcher's (dest -> default), read after all when they form a placement
    per_process: dict[str, Val] = field(default_factory=dict)
    # Its sub-commands (`p.add_subparsers(dest="cmd").add_parser("train")`): name -> that command's parser,
    # and the dest that records which one was given (None: not recorded)
    commands: dict[str, ParserV] = field(default_factory=dict)
    command_dest: str | None = None
    # An optparse.OptionParser: `add_option`, defaults used as given (optparse converts only what the command line
    # gives), and `parse_args()` gives (options, arguments)
    optparse: bool = False


@dataclass(eq=False)
class SubparsersV(Val):
    """What `add_subparsers()` returns: its `add_parser(name, ...)` adds a sub-command to `parser`."""

    parser: ParserV


def new_parser(args: list[Val], kwargs: dict[str, Val]) -> ParserV:
    """`argparse.ArgumentParser(..., parents=[base])`: the parents' arguments first."""
    parser = ParserV()
    parents = kwargs.get("parents")
    if isinstance(parents, SeqV) and parents.items is not None:
        for p in parents.items:
            if isinstance(p, ParserV):
                parser.defaults.update(p.defaults)
                parser.per_process.update(p.per_process)
    return parser


def method(
    parser: ParserV,
    meth: str,
    args: list[Val],
    kwargs: dict[str, Val],
    node: Any = None,
    convert: Callable[[Any, Val], Val] | None = None,
) -> Val:
    """A call of a method of the parser (or of a group of it); `node`, the call as written; `convert`, what a
    `type=lambda s: ...` of one parameter gives for a value (its body evaluated with the parameter bound)."""
    if meth == "add_option" and parser.optparse:
        meth, kwargs = "add_argument", {k: v for k, v in kwargs.items() if k != "type"}
    if meth == "add_argument":
        dest = _dest(args, kwargs)
        if dest is not None:
            default = _default(kwargs, _splitter(node))
            lam = _type_lambda(node)
            given = kwargs.get("default")
            if lam is not None and convert is not None and isinstance(given, Const) and isinstance(given.value, str):
                # `type=lambda s: [torch.device(d) for d in s.split(",")]` of a string default: argparse converts it
                action = kwargs.get("action")
                if action is None or (isinstance(action, Const) and action.value == "store"):
                    default = convert(lam, given)
            parser.defaults[dest] = UNK if _set_per_process(dest, default) else default
            if _set_per_process(dest, default):
                parser.per_process[dest] = default
        return UNK
    if meth in ("add_argument_group", "add_mutually_exclusive_group"):
        return parser  # a group's arguments are the parser's
    if meth == "add_subparsers":
        given = kwargs.get("dest")
        parser.command_dest = given.value if isinstance(given, Const) and isinstance(given.value, str) else None
        return SubparsersV(parser)
    if meth == "set_defaults":
        parser.defaults.update(kwargs)
        return Const(None)
    if meth in ("parse_args", "parse_known_args"):
        given = args[0] if args else kwargs.get("args", Const(None))
        no_flags = (isinstance(given, Const) and given.value is None) or (
            isinstance(given, SeqV) and given.items is not None and not given.items
        )
        ns: Val = DictV({**parser.defaults, **_placement(parser.per_process)}, namespace=True) if no_flags else UNK
        if not no_flags:
            ns = _command_defaults(parser, given)
        if parser.optparse and meth == "parse_args":
            return SeqV((ns, SeqV((), kind="list") if no_flags else SeqV(None)), kind="tuple")
        return SeqV((ns, SeqV(None)), kind="tuple") if meth == "parse_known_args" else ns
    return UNK


def new_option_parser() -> ParserV:
    """`optparse.OptionParser(...)`: read as argparse's parser is, with optparse's own rules (ParserV.optparse)."""
    return ParserV(optparse=True)


def add_command(subparsers: SubparsersV, args: list[Val], kwargs: dict[str, Val]) -> Val:
    """`sub.add_parser("train", parents=[common])`: a parser of its own, run when the command line names it."""
    if not args or not (isinstance(args[0], Const) and isinstance(args[0].value, str)):
        return UNK
    command = new_parser(args[1:], kwargs)
    subparsers.parser.commands[args[0].value] = command
    return command


def _command_defaults(parser: ParserV, given: Val) -> Val:
    """`parse_args(["train"])` (`sys.argv[1:] or ["train"]`): a sub-command named alone, with no flag: the
    parser's defaults, then the command's, and the command's name under its dest. Anything else is not known."""
    if not (isinstance(given, SeqV) and given.items is not None and len(given.items) == 1):
        return UNK
    (name,) = given.items
    command = parser.commands.get(name.value) if isinstance(name, Const) and isinstance(name.value, str) else None
    if command is None:
        return UNK
    held = {**parser.per_process, **command.per_process}
    values = {**parser.defaults, **command.defaults, **_placement(held)}
    if parser.command_dest is not None:
        values[parser.command_dest] = name
    return DictV(values, namespace=True)


# Words of an argument a launcher sets for each process (`--local_rank`, `--gpu`, `--device_id`): its
# default (0, -1, None) is a placeholder, not the GPU a process of the job uses.
_PER_PROCESS_WORDS = ("rank", "gpu", "device", "cuda", "local")


def _set_per_process(dest: str, default: Val) -> bool:
    """An index of a GPU or a rank whose default stands in for what each process is given."""
    number = isinstance(default, Const) and (default.value is None or type(default.value) is int)
    return number and any(w in dest.lower() for w in _PER_PROCESS_WORDS)


def _placement(held: dict[str, Val]) -> dict[str, Val]:
    """The GPU indices held back as per process that are a placement instead: two or more, none a rank, with
    distinct non-negative defaults (`--encoder-gpu 0 --decoder-gpu 1`); else those named for a part of the model
    (`--ngram-gpu 1`: `_for_a_part`) with a non-negative default."""
    values = [v.value for v in held.values() if isinstance(v, Const)]
    if (
        len(held) >= 2
        and len(values) == len(held)
        and all(type(x) is int and x >= 0 for x in values)
        and len(set(values)) == len(values)
        and not any("rank" in d.lower() or "local" in d.lower() for d in held)
    ):
        return dict(held)
    return {
        dest: v
        for dest, v in held.items()
        if isinstance(v, Const) and type(v.value) is int and v.value >= 0 and _for_a_part(dest)
    }


# Words of a GPU flag's name that name no part of a model (`--gpu-id`, `--main-device`, `--use-cuda`).
_NO_PART = frozenset({"id", "ids", "idx", "index", "num", "no", "number", "n", "use", "main", "default", "which", "my"})


def _for_a_part(dest: str) -> bool:
    """A GPU index named for a part of the model (`ngram_gpu`, `head_device`, `teacher_gpu`): a launcher gives
    each process a GPU (`--gpu`, `--device-id`, `--local-rank`), never one for a part of the model, so its default
    is the placement the script runs with."""
    words = [w for w in dest.lower().replace("-", "_").split("_") if w]
    if any(w in ("rank", "local") for w in words) or not any(w in ("gpu", "device", "cuda") for w in words):
        return False  # a rank, or a count (`--num-gpus`)
    return any(w not in _PER_PROCESS_WORDS and w not in _NO_PART and not w.isdigit() for w in words)


def environment_placement(module: Any) -> dict[str, int | str]:
    """The GPU settings a script reads from its environment with a default, at its top level or in its functions
    (`ENCODER_GPU = int(os.environ.get("OCR_ENCODER_GPU", 0))`, `torch.device(os.getenv("K_DEVICE", "cuda:1"))`),
    when they form a placement by the rule of `_placement`: two or more, distinct GPUs, no rank among them.
    Variable -> default, as written (an index or a device string). No launcher sets such variables, so the script
    runs with the defaults unless its user sets them; others stay unknown."""
    import libcst as cst

    held: dict[str, int | str] = {}
    twice: set[str] = set()
    for node in walk(module):
        if not isinstance(node, cst.Call):
            continue
        read = environment_read(node)
        if read is not None and read[1] is not None and _names_a_gpu(*read):
            if held.get(read[0], read[1]) != read[1]:
                twice.add(read[0])  # read with two defaults: which one holds is not known
            held[read[0]] = read[1]
    for var in twice:
        del held[var]
    if any(w in var.lower() for var in held for w in ("rank", "local", "world")):
        return {}
    gpus = {var: _gpu_of(default) for var, default in held.items()}
    if len(held) >= 2 and all(g is not None for g in gpus.values()) and len(set(gpus.values())) == len(gpus):
        return held
    # One variable holding the whole list (`os.environ.get("WRN_DEVICES", "cuda:0,cuda:1").split(",")`): two or
    # more distinct GPUs in its default are a placement by themselves, and the script's other GPU settings
    # (`BYOL_TARGET_GPU`, "1", beside `BYOL_ONLINE_GPUS`, "0,1") are read with it.
    listed = {var: default for var, default in held.items() if _distinct_gpus(default)}
    if listed:
        return {var: default for var, default in held.items() if var in listed or _gpu_of(default) is not None}
    return listed


# What separates the GPUs a default lists: `"cuda:0,cuda:1"`, `"cuda:0>cuda:1"` (first > second, read with
# `.partition(">")`), `"0;1"`, `"cuda:0|cuda:1"`, `"0 1"`, `"cuda:0->cuda:1"` (never `:`, which is a device's own)
_LIST_SEPARATOR = re.compile(r"\s*(?:->|=>|[,;>|/\s])\s*")


def _distinct_gpus(default: int | str) -> bool:
    """A default that lists two or more distinct GPUs (`"cuda:0,cuda:1"`, `"0,1"`, `"G=1,D=0"`, `"cuda:0>cuda:1"`), or as
    the values of a JSON object or list (`'{"encoder": "cuda:0", "decoder": "cuda:1"}'`, read with json.loads)."""
    parts = json_devices(default)
    if parts is None:
        # each part's device after its `=` where it is named (`"G=1,D=0"`)
        parts = [p.rpartition("=")[2].strip() for p in _LIST_SEPARATOR.split(str(default).strip())]
    gpus = [_gpu_of(p) for p in parts]
    return len(parts) >= 2 and None not in gpus and len(set(gpus)) == len(gpus)


def json_devices(default: int | str) -> list[str] | None:
    """The values of a JSON object or list, as text, where every one is a number or a string; else None."""
    import json

    text = str(default).strip()
    if not text.startswith(("{", "[")):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    values = list(data.values()) if isinstance(data, dict) else data
    if not values or not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in values):
        return None
    return [str(v) for v in values]


def environment_read(node: Any) -> tuple[str, int | str | None] | None:
    """(variable, default) of `os.environ.get("VAR", default)` or `os.getenv("VAR", default)`: the default when
    it is a number or a string (None for another one, or none); None for any other node."""
    import libcst as cst

    if not (isinstance(node, cst.Call) and isinstance(node.func, (cst.Attribute, cst.Name))):
        return None
    if cst.Module([]).code_for_node(node.func) not in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
        return None
    if not node.args or not isinstance(var := node.args[0].value, cst.SimpleString):
        return None
    if not isinstance(name := var.evaluated_value, str):
        return None
    default = node.args[1].value if len(node.args) == 2 else None
    if isinstance(default, cst.Integer):
        return name, int(default.value)
    if isinstance(default, cst.SimpleString) and isinstance(default.evaluated_value, str):
        return name, default.evaluated_value
    return name, None


def _names_a_gpu(var: str, default: int | str | None) -> bool:
    """Does the variable say it holds a GPU (`OCR_DECODER_GPU`, `K_DEVICE`), or its default name one (`"cuda:1"`)?"""
    return (
        any(w in var.lower() for w in ("gpu", "device", "cuda", "placement"))
        or str(default).startswith("cuda")
        or any(v.startswith("cuda") for v in json_devices(default or "") or ())
    )


def _gpu_of(default: int | str) -> int | None:
    """The GPU a default names: an index (`0`, `"1"`) or a CUDA device string with one (`"cuda:1"`)."""
    text = str(default)
    if text.isdigit():
        return int(text)
    kind, _, index = text.partition(":")
    return int(index) if kind == "cuda" and index.isdigit() else None


def _dest(args: list[Val], kwargs: dict[str, Val]) -> str | None:
    """argparse's dest: `dest=`, else the first long option (`--head-device` -> head_device), else the
    first short one (`-d` -> d), else a positional argument's name."""
    given = kwargs.get("dest")
    if given is not None:
        return given.value if isinstance(given, Const) and isinstance(given.value, str) else None
    flags = [a.value for a in args if isinstance(a, Const) and isinstance(a.value, str)]
    if len(flags) != len(args) or not flags:
        return None
    long = [f for f in flags if f.startswith("--")]
    short = [f for f in flags if f.startswith("-") and not f.startswith("--")]
    name = long[0][2:] if long else short[0][1:] if short else flags[0]
    return name.replace("-", "_") or None


def _type_lambda(node: Any) -> Any:
    """The `type=lambda s: ...` of one plain parameter in an add_argument call, else None."""
    import libcst as cst

    if not isinstance(node, cst.Call):
        return None
    kind = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "type"), None)
    if (
        isinstance(kind, cst.Lambda)
        and len(kind.params.params) == 1
        and kind.params.params[0].default is None
        and not isinstance(kind.params.star_arg, cst.Param)
        and not kind.params.kwonly_params
    ):
        return kind
    return None


def _splitter(node: Any) -> str | None:
    """The separator of `type=lambda s: s.split(",")` in an add_argument call, else None."""
    import libcst as cst

    if not isinstance(node, cst.Call):
        return None
    kind = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "type"), None)
    if not (
        isinstance(kind, cst.Lambda)
        and len(kind.params.params) == 1
        and not isinstance(kind.params.star_arg, cst.Param)
    ):
        return None
    name, body = kind.params.params[0].name.value, kind.body
    if not (
        isinstance(body, cst.Call)
        and isinstance(body.func, cst.Attribute)
        and body.func.attr.value == "split"
        and isinstance(body.func.value, cst.Name)
        and body.func.value.value == name
        and len(body.args) == 1
        and body.args[0].keyword is None
        and isinstance(body.args[0].value, cst.SimpleString)
    ):
        return None
    sep = body.args[0].value.evaluated_value
    return sep if isinstance(sep, str) and sep else None


def _default(kwargs: dict[str, Val], splitter: str | None = None) -> Val:
    action = kwargs.get("action")
    act = action.value if isinstance(action, Const) else None if action is None else "?"
    default = kwargs.get("default")
    if default is None:
        if act == "store_true":
            return Const(False)
        if act == "store_false":
            return Const(True)
        return Const(None) if act in (None, "store", "append", "extend", "count") else UNK
    if act not in (None, "store"):
        return default if act in ("store_true", "store_false", "store_const") else UNK
    kind = kwargs.get("type")
    if kind is None or not (isinstance(default, Const) and isinstance(default.value, str)):
        return default  # argparse converts only a string default with type=
    if splitter is not None:
        return SeqV(tuple(Const(part) for part in default.value.split(splitter)))
    convert = _CONVERSIONS.get(kind.q) if isinstance(kind, QName) else None
    if convert is None:
        return UNK
    try:
        return Const(convert(default.value))
    except ValueError:
        return UNK
