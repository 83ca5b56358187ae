"""The model zoo: the paper's facts (``paper``), its attention variants and block (``layers``), the timm
architecture with its pretrained configs and registry (``vit_minimal``), and the transformers config,
models and image processor that wrap that same model (``configuration_``, ``modeling_``,
``image_processing_vit_minimal``).

The six modules import one another only by sibling relative imports, and from nothing else in the
package: ``save_pretrained`` copies a model's module and its relative imports into one flat folder, so
this folder is exactly the code that a checkpoint carries for ``trust_remote_code``.
"""
