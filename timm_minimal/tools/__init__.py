"""Tools built on the zoo and the trainer: the paper grid (``reproduce``), the benchmarks
(``benchmark``, ``training_benchmark``), evaluation (``evaluate``), attention maps (``attention``),
publishing to the Hub (``publish``, ``hf_export``) and the first run (``demo``)."""
