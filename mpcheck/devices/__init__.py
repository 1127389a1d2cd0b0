"""The static device model: where every module, parameter and tensor lives.

values.py      the lattice (unknown, a device, a set of devices), abstract values and helpers on them
names.py       imports and aliases, without libcst's metadata providers
torchapi.py    the torch names the model merges and the name sets the library handlers read
library.py     calls of library names: one table, canonical name -> handler (EXACT + FAMILIES)
events.py      the facts recorded for the rules (one frozen dataclass per kind) and their Recorder
program.py     functions, classes, the state of a path, the entry point (Scope), the Part base class
interp.py      Interp: one file's interpretation; entry points; holds the parts below
statements.py  Statements: blocks, branches, loops, with, assignment
expressions.py Expressions: the value of an expression; operands that must agree
calls.py       Calls: functions, modules and methods of the file; classes of other files by summary
instances.py   Instances: classes built, and where their parts end up (split or not)
moves.py       Moves: .to() / .cuda() / .cpu(), transfers, collapses, lineage steps, stage calls and merges (MP006)
gpucount.py    an assumed GPU count: what torch.cuda.device_count() answers, the bounds the code puts on it
shared.py      module objects held by two stages (one list of blocks, a default argument) moved twice
device_loops.py a loop over devices in an __init__ that builds modules but never reads its device, a list of
               devices made by a loop that never reads its index (MP017)
data_moves.py  a module moved one tensor at a time through `.data`; BatchNorm statistics left or set elsewhere
pre_hooks.py   forward pre-hooks of the file's own, run where their module is called
module_tree.py a module's submodules as modules() / children() give them, isinstance of torch.nn classes
unmoved.py     models provably never moved: their unplaced modules are on the CPU
summary.py     JSON summaries of a file's classes and functions for other files
summarized.py  using those summaries: imported names, calls of summarized classes and functions
callers.py     calls of this file's functions made in other linted files: their arguments, run per call
as_built.py    is an instance of another file's class (and what it was built with) left as built where its method is called
model.py       DeviceModel: one interpretation per file; rules ask it for facts by type
describe.py    wording shared by the rules' messages
walk.py        a fast walk of a libcst tree's non-layout nodes (what .children gives, without rebuilding)

devices imports no rule; rules read facts (model.facts(Type)), never the interpreter.
"""
