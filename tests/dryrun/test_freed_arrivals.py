"""A freed arrival's id, taken by a new tensor, is no read of what arrived (checks/arrivals.py).

The dry run's micro-batch pipeline under no_grad (test_correct_programs.py's MICRO_BATCHES_NO_GRAD), each
chunk kept for the final concatenation as a detached copy of what came back: the arrived tensor itself is
freed, and CPython gives its id to the next object of its size, at times a tensor that the next chunk's ops
read. Before arrived tensors were followed by weak reference, that read marked the waiting chunk read, the
next chunk's departure continued its chain, and the dry run reported a ping-pong (MP006) on this correct
program. Which variant meets the reuse depends on CPython's allocations (on the code before the fix, under
pytest, `.data` with one-row chunks did); tests/runtime/test_core_arrivals.py forces it.
"""

import pytest
from test_correct_programs import MICRO_BATCHES_NO_GRAD

HOP = "chunks[c] = s.to(groups[(g + 1) % len(groups)][0])"


@pytest.mark.parametrize("chunk", [1, 2, 4])
@pytest.mark.parametrize("kept", [".detach()", ".detach().view(s.shape)", ".data"])
def test_micro_batches_kept_as_detached_copies_run_clean(script, dryrun_cli, kept, chunk):
    program = MICRO_BATCHES_NO_GRAD.replace(HOP, HOP + kept).replace(
        "torch.split(self.embeddings(ids), 2)", f"torch.split(self.embeddings(ids), {chunk})"
    )
    assert HOP + kept in program and f"ids), {chunk})" in program
    status, report, err = dryrun_cli(script(program), "--gpus", "2")
    assert status == 0, err
    assert report["findings"] == []
