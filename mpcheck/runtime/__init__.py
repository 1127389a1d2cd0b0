"""The runtime faces: the debug mode on real GPUs and the dry run on virtual ones.

Importing this package does not import torch; its modules do, when used.
checks/ holds what both faces share, capture/ how they see the program (modes, hooks,
the session); real/ and virtual/ are the two faces, commands/ their command lines.
"""
