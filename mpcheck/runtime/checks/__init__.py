"""The checks both runtime faces share, and what they report: no knowledge of real or virtual devices.

No module here imports torch at import time."""
