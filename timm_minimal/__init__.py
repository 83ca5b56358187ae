"""timm-minimal: the minimal transformers of "Reducing the Transformer Architecture to a Minimum"
(Bermeitinger et al., KDIR 2024) as timm architectures and Hugging Face transformers models.

Importing the package registers every ``vit_minimal_*`` architecture with timm::

    import timm, timm_minimal
    model = timm.create_model('vit_minimal_sym_6x4.mnist')

and the ``vit_minimal`` model type with transformers' ``AutoConfig``, ``AutoModel``,
``AutoModelForImageClassification`` and ``AutoImageProcessor`` (when transformers loads them, so that a
timm-only program never imports transformers)::

    from transformers import AutoModelForImageClassification
    model = AutoModelForImageClassification.from_pretrained('path/to/checkpoint')
"""
import time

# When this interpreter imported the package, before torch: the clock of a training launch (``elapsed`` in
# metrics.jsonl) starts here, so it leaves out whatever ran before Python (pip, in the same shell line)
STARTED_AT = time.perf_counter()

import importlib  # noqa: E402
import sys  # noqa: E402

from .transformers_registration import register_with_transformers  # noqa: E402

# What ``import timm_minimal`` gives, by the module that defines it. Importing these imports torch and timm, and
# importing ``models.vit_minimal`` registers the architectures with timm.
_EAGER = {
    'models.layers': ('ATTENTION_LAYERS', 'Block', 'CholAttention', 'MinimalAttention', 'QKAttention',
                      'QKOnlyAttention', 'StdAttention', 'SymAttention', 'get_attn_layer'),
    'models.datasets': ('DATASETS', 'DatasetInfo'),
    'models.vit_minimal': ('ARCHITECTURES', 'VisionTransformerMinimal', 'checkpoint_filter_fn'),
    'examples': ('example_image', 'example_images'),
}


def load_models() -> None:
    """Imports the models (torch, timm) and registers every architecture with timm; done by ``import
    timm_minimal`` itself, unless a console script imports the package to print its help
    (``timm_minimal_scripts``)."""
    for module, names in _EAGER.items():
        loaded = importlib.import_module(f'.{module}', __name__)
        globals().update({name: getattr(loaded, name) for name in names})


def _version() -> str:
    """The installed distribution's version (pyproject.toml is its one home)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version('timm-minimal')
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return '0+unknown'


__version__ = _version()

# The transformers classes, imported on first use (PEP 562): each of them imports transformers.
_TRANSFORMERS_CLASSES = {
    'VitMinimalConfig': 'configuration_vit_minimal',
    'VitMinimalImageProcessor': 'image_processing_vit_minimal',
    'VitMinimalModel': 'modeling_vit_minimal',
    'VitMinimalForImageClassification': 'modeling_vit_minimal',
    'VitMinimalPreTrainedModel': 'modeling_vit_minimal',
}


def __getattr__(name: str):
    module = _TRANSFORMERS_CLASSES.get(name)
    if module is not None:
        return getattr(importlib.import_module(f'.models.{module}', __name__), name)
    if any(name in names for names in _EAGER.values()):  # asked for before ``load_models`` ran
        load_models()
        return globals()[name]
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_TRANSFORMERS_CLASSES) | {n for names in _EAGER.values() for n in names})


register_with_transformers()
if not getattr(sys.modules.get('timm_minimal_scripts'), 'parsing', False):
    load_models()
