"""The debug mode on real GPUs: `mpcheck.debug` and the devices as PyTorch reports them."""
