"""The model zoo: the paper's facts (``paper``), the dataset facts of every pretrained tag (``datasets``), the
attention variants and block (``layers``), the timm architecture and its registry (``vit_minimal``), its
pretrained configs (``pretrained``) and the checks of a weights file before loading (``weights_check``), and
the transformers config, models and image processor that wrap that same model (``configuration_``,
``modeling_``, ``image_processing_vit_minimal``).

These modules import one another only by sibling relative imports, and from nothing else in the package:
``save_pretrained`` copies a model's module and its relative imports into one flat folder, so this folder is
exactly the code that a checkpoint carries for ``trust_remote_code``.
"""
