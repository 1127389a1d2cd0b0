"""`python -m mpcheck` is the `mpcheck` command."""

import sys

from mpcheck.cli import main

sys.exit(main())
