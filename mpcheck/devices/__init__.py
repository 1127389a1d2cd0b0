"""The static device model: where every module, parameter and tensor lives.

values.py   the lattice (unknown, a device, a set of devices) and abstract values
names.py    imports and aliases, without libcst's metadata providers
torchapi.py what the model knows of PyTorch's API
interp.py   the interpreter over statements and expressions (entry points, classes)
calls.py    library calls, method calls and moves
summary.py  JSON summaries of a file's classes and functions for other files
model.py    DeviceModel: one interpretation per file, queried by the rules
describe.py wording shared by the rules' messages
"""
