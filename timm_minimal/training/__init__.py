"""Training: the accelerate trainer (``train``), its plan (``plan``), loop (``engine``) and command line (``cli``);
the data (``data/``: datasets, image folders, the two data paths, the augmentation), what a run leaves and reads back
(``run/``: the folder, run.json, checkpoints, resuming), how a run uses the CPU (``cpu/``), distillation, the
trackers and the per-dataset recipes (``recipes/``)."""
