"""Tools built on the zoo and the trainer: the paper grid (``reproduce``), the benchmarks
(``benchmark``, ``training_benchmark``, ``deployment_benchmark``), evaluation (``evaluate``), ONNX and
int8 export (``export``), attention maps (``attention``), publishing to the Hub (``publish``,
``hf_export``) and the first run (``demo``)."""
