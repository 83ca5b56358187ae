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
from .models.layers import (
    ATTENTION_LAYERS, Block, CholAttention, MinimalAttention, QKAttention, QKOnlyAttention, StdAttention,
    SymAttention, get_attn_layer,
)
from .models.datasets import DATASETS, DatasetInfo
from .models.vit_minimal import ARCHITECTURES, VisionTransformerMinimal, checkpoint_filter_fn
from .examples import example_image, example_images
from .transformers_registration import register_with_transformers

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
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    import importlib
    return getattr(importlib.import_module(f'.models.{module}', __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_TRANSFORMERS_CLASSES))


register_with_transformers()
