"""Training: the accelerate trainer (``train``), its loop (``engine``), the datasets and the two data
paths (``data``, ``device_data``, ``batch_augment``), checkpoints (``checkpoint``), the run folder
(``run_folder``) and the per-dataset recipes (``recipes/``)."""
