"""Driver: the PyTorch model-parallel tutorial's three models, each trained as the tutorial trains it.

The file is intermediate_source/model_parallel_tutorial.py at the case's commit
(its cached path is the second argument). Its module level is a script that
times and plots; the driver loads its definitions (`load_definitions`) and runs,
as written, the "Basic Usage" lines (ToyModel on cuda:0 and cuda:1, one SGD
step), then calls the tutorial's own `train()` on ModelParallelResNet50 and on
PipelineParallelResNet50. Stubbed: the data size (the tutorial's module
constants: one batch of 4 images of 64x64, micro-batches of 2, so the pipeline
loop runs) and torchvision's registrations of fake kernels for its compiled
detection ops (the wheel's ops are built for CUDA torch; ResNet uses none of them).

    python pytorch_tutorial.py SITE_DIR TUTORIAL_PY
"""

import sys
import types

sys.path.insert(0, sys.argv[1])
sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")

from _common import load_definitions  # noqa: E402

BASIC_USAGE = (40, 74)  # imports, ToyModel and its training step, as the tutorial writes them


def main() -> None:
    tutorial = load_definitions(sys.argv[2], "model_parallel_tutorial", run=BASIC_USAGE)
    tutorial.num_batches, tutorial.batch_size, tutorial.image_w, tutorial.image_h = 1, 4, 64, 64
    tutorial.train(tutorial.ModelParallelResNet50())
    tutorial.train(tutorial.PipelineParallelResNet50(split_size=2))


if __name__ == "__main__":
    main()
