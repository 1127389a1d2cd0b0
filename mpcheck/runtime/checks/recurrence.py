"""When a repeated copy is per-step waste (MP011) and when it is one-time setup.

MP011 is about data copied on every forward or every step: the same unchanged data moved to the same
device again while the model runs. Loading and building a model copy data too, and sometimes the same
data twice: `from_pretrained(..., device_map=...)` copies a checkpoint tensor once per key, and the two
keys of tied embeddings share one tensor, so it is copied twice (accelerate's
`set_module_tensor_to_device`, then `tie_weights()` drops one copy); a loader loop of the user's own over
a state dict does the same. That costs once, at load time: there is no per-step copy to keep.

What tells them apart is the model's work around the two copies. A `Mark` says where the program
stands when a copy is made: the thread, its counts of forward passes, ended passes (a loss, a backward)
and optimizer steps, whether a module's forward is running, and the forward passes begun and ended in
all threads. Two copies made in two threads (a loader's thread pool) are compared by the last: one
thread's counts say nothing of another's work. A repeat is the
model's repeated work, and reported, when either copy was made inside a forward pass, or the model ran
between the two copies (a constant moved in every iteration of a training loop is caught at the second
iteration). Two copies with no model work between them are setup, and not reported, when the model has
not run yet (loading and placing it before training) or when both were made inside a library's routine
that one line of the user's called (`from_pretrained` loading a model in the middle of a run). The
user's own code copying the same data twice between two calls of the model (a beam index moved to one
device twice per generation step) is reported. The earlier copy is then forgotten for the newer one, so
a setup copy followed by the same copy in the loop is caught too.

"Every step" is literal: a repeat counts only when the earlier copy of the same data was made in this
iteration of the training loop or in the one before (`Checker.rounds`: an iteration ends when the first
optimizer that ever stepped steps, or when one that already stepped in it steps again, so a GAN's two
optimizers make one iteration, or at an explicit session step). Data copied again only after two or more iterations is not copied on every step but once per
pass over a data set: each slice of a host tensor moved once per epoch (`X[s:s + B].to(dev)`,
`X.split(B)`), a validation set moved once per epoch. A constant moved in every iteration, or several times
in one, is still a repeat. Without optimizer steps (inference) the iterations do not advance, and the
model's work between the copies decides as below.

A copy that autograd records (of a tensor that requires grad, with grad enabled: a tied weight used on
a second GPU) belongs to its forward pass's graph, which backward frees: the next pass needs a copy of
its own even when the weight has not changed (gradient accumulation runs several passes between two
optimizer steps). Such copies repeat only within one forward pass.
"""

from __future__ import annotations

# (thread's serial number, forward passes, passes ended, optimizer steps, inside a forward pass; forward passes begun and
# ended in all threads)
Mark = tuple[int, int, int, int, bool, int]


def recurs(earlier: Mark, now: Mark, *, in_library: bool, in_graph: bool = False) -> bool:
    """Do two copies of the same data belong to the model's repeated work rather than to setup?
    in_library: the later copy was made inside a library's code (the site has a library context);
    in_graph: autograd records the copy (its source requires grad, grad enabled)."""
    if in_graph:
        return earlier[:3] == now[:3]  # one forward pass (same thread, pass, ended passes): reusable
    if earlier[4] or now[4]:
        return True
    if earlier[0] != now[0]:  # two threads: the model's work anywhere between them, or before
        if earlier[3] != now[3] or earlier[5] != now[5]:
            return True
        model_ran = now[3] > 0 or now[5] > 0
    else:
        if earlier[:4] != now[:4]:
            return True
        model_ran = any(now[1:4])
    return model_ran and not in_library
