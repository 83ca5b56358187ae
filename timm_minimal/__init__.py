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

A shipped checkpoint loads in transformers offline by its name, from the folder its Hub repository holds::

    model = AutoModelForImageClassification.from_pretrained(timm_minimal.pretrained_folder('vit_minimal_sym_6x4.mnist'))
"""
import time

# When this interpreter imported the package, before torch: the clock of a training launch (``elapsed`` in
# metrics.jsonl) starts here, so it leaves out whatever ran before Python (pip, in the same shell line)
STARTED_AT = time.perf_counter()

import importlib.metadata  # noqa: E402
import sys  # noqa: E402

from .lazy import LazyNames  # noqa: E402
from .transformers_registration import register_with_transformers  # noqa: E402

# What ``import timm_minimal`` gives, by the module that defines it. Importing these imports torch and timm, and
# importing ``models.vit_minimal`` registers the architectures with timm.
_MODELS = {
    'models.layers': ('ATTENTION_LAYERS', 'Block', 'CholAttention', 'MinimalAttention', 'QKAttention',
                      'QKOnlyAttention', 'StdAttention', 'SymAttention', 'get_attn_layer'),
    'models.datasets': ('DATASETS', 'DatasetInfo'),
    'models.vit_minimal': ('ARCHITECTURES', 'VisionTransformerMinimal', 'checkpoint_filter_fn'),
    'examples': ('example_image', 'example_images'),
}
# The transformers classes, imported on first use only: each of them imports transformers.
_TRANSFORMERS_CLASSES = {
    'models.configuration_vit_minimal': ('VitMinimalConfig',),
    'models.image_processing_vit_minimal': ('VitMinimalImageProcessor', 'VitMinimalImageProcessorPil',
                                            'VitMinimalImageProcessorFast'),
    'models.modeling_vit_minimal': ('VitMinimalModel', 'VitMinimalForImageClassification',
                                    'VitMinimalPreTrainedModel'),
}
# A folder that transformers loads a shipped checkpoint from, offline (``from_pretrained(pretrained_folder(name))``).
_ZOO = {'tools.hub.zoo': ('pretrained_folder',)}
_NAMES = LazyNames(__name__, {**_MODELS, **_TRANSFORMERS_CLASSES, **_ZOO}, globals())
__getattr__, __dir__ = _NAMES.getattr, _NAMES.dir


def load_models() -> None:
    """Imports the models (torch, timm) and registers every architecture with timm; done by ``import
    timm_minimal`` itself, unless a console script imports the package to print its help
    (``timm_minimal_scripts``)."""
    _NAMES.load(_MODELS)


def _version() -> str:
    """The installed distribution's version (pyproject.toml is its one home)."""
    try:
        return importlib.metadata.version('timm-minimal')
    except importlib.metadata.PackageNotFoundError:  # imported from a source tree that was never installed
        return '0+unknown'


__version__ = _version()

register_with_transformers()
if not getattr(sys.modules.get('timm_minimal_scripts'), 'parsing', False):
    load_models()
