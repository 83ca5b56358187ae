"""Tools built on the zoo and the trainer, one room per job a user does:

- ``hub``: publishing a training run to the Hugging Face Hub (``publish``, ``hf_export``);
- ``deploy``: export for deployment (``export``: ONNX, int8);
- ``inside``: looking inside the models (``attention``, the browser ``app``);
- ``paper``: reproducing the paper (``reproduce``: the grid and its reports; ``results_summary``);
- ``benchmark``: the benchmarks (speed, memory, training, deployment, CPU modes).

What several rooms use stays here: ``evaluate`` (accuracy over a test split), ``demo`` (the first run),
``common`` and ``staging``."""
