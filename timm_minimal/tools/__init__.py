"""Tools built on the zoo and the trainer: the paper grid (``reproduce``), the benchmarks
(``benchmark``: also the training, deployment and CPU-mode benchmarks), evaluation (``evaluate``), ONNX and
int8 export (``export``), attention maps (``attention``), publishing to the Hub (``publish``,
``hf_export``) and the first run (``demo``)."""
