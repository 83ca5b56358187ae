"""timm-minimal: the minimal transformers of "Reducing the Transformer Architecture to a Minimum"
(Bermeitinger et al., KDIR 2024) as timm architectures.

Importing the package registers every ``vit_minimal_*`` architecture with timm::

    import timm, timm_minimal
    model = timm.create_model('vit_minimal_sym_6x4.mnist')
"""
from .layers import (
    ATTENTION_LAYERS, Block, CholAttention, MinimalAttention, QKAttention, QKOnlyAttention, StdAttention,
    SymAttention, get_attn_layer,
)
from .vit_minimal import ARCHITECTURES, DATASETS, VisionTransformerMinimal, checkpoint_filter_fn

__version__ = '0.1.0'
