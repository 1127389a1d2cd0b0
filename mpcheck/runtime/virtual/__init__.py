"""The dry run: virtual CUDA devices on a machine with none, and `mpcheck.dryrun` on top of them."""
