"""The runtime faces: the debug mode on real GPUs and the dry run on virtual ones.

Importing this package does not import torch; its modules do, when used.
core.py holds the checks both faces share; mode.py the checking function mode.
"""
