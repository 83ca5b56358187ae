"""timm-minimal: the minimal transformers of "Reducing the Transformer Architecture to a Minimum"
(Bermeitinger et al., KDIR 2024) as timm architectures and Hugging Face transformers models.

Importing the package registers every ``vit_minimal_*`` architecture with timm::

    import timm, timm_minimal
    model = timm.create_model('vit_minimal_sym_6x4.mnist')

and the ``vit_minimal`` model type with transformers' ``AutoConfig``, ``AutoModel``,
``AutoModelForImageClassification`` and ``AutoImageProcessor``::

    from transformers import AutoModelForImageClassification
    model = AutoModelForImageClassification.from_pretrained('path/to/checkpoint')
"""
from .models.layers import (
    ATTENTION_LAYERS, Block, CholAttention, MinimalAttention, QKAttention, QKOnlyAttention, StdAttention,
    SymAttention, get_attn_layer,
)
from .models.datasets import DATASETS, DatasetInfo
from .models.vit_minimal import ARCHITECTURES, VisionTransformerMinimal, checkpoint_filter_fn
from .models.configuration_vit_minimal import VitMinimalConfig
from .models.image_processing_vit_minimal import VitMinimalImageProcessor
from .models.modeling_vit_minimal import VitMinimalForImageClassification, VitMinimalModel, VitMinimalPreTrainedModel

__version__ = '0.1.0'


def _register_with_transformers() -> None:
    from transformers import AutoConfig, AutoImageProcessor, AutoModel, AutoModelForImageClassification, AutoVideoProcessor

    AutoConfig.register(VitMinimalConfig.model_type, VitMinimalConfig, exist_ok=True)
    AutoModel.register(VitMinimalConfig, VitMinimalModel, exist_ok=True)
    AutoModelForImageClassification.register(VitMinimalConfig, VitMinimalForImageClassification, exist_ok=True)
    AutoImageProcessor.register(
        VitMinimalConfig, image_processor_classes={'torchvision': VitMinimalImageProcessor}, exist_ok=True)
    # No video processor, said locally: transformers' pipelines look for one and would otherwise take the
    # checkpoint's AutoImageProcessor auto_map for remote video code and ask whether to run it.
    try:
        AutoVideoProcessor.register(VitMinimalConfig, video_processor_classes={}, exist_ok=True)
    except TypeError:  # an older transformers without per-backend registration
        pass


_register_with_transformers()
