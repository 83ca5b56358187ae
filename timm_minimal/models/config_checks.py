"""What a checkpoint's ``config.json`` must say before a model is built from it, in timm and in transformers.

A config names its architecture twice: ``architecture`` (the registered entry point timm calls) and ``model_args``
(the keywords timm passes on top of the entry point's own, and the fields transformers reads). The name of a model
whose depth and heads are registered is that exact name; any other depth or head count keeps its family's
``<attention>[_mlp]_6x1`` name, with ``model_args`` carrying the difference. A config whose two views disagree would
build one of the two models silently: it is refused, in both libraries, naming both.

This module imports only its siblings: it travels with a checkpoint's remote code.
"""
from typing import Any, Dict, Mapping, Sequence

from .paper import arch_name, parse_arch

__all__ = ['NAME_KEYWORDS', 'architecture_args', 'registered_architecture', 'check_architecture', 'check_config_values']

# the model keywords a registered name spells: the attention variant, the MLP, the depth and the heads
NAME_KEYWORDS = ('attn_type', 'use_mlp', 'depth', 'num_heads')


def architecture_args(name: str, registered: Sequence[str]) -> Dict[str, Any]:
    """attn_type, use_mlp, depth and num_heads of a registered ``vit_minimal_*`` architecture name."""
    if name not in registered:
        raise ValueError(f"Unknown architecture '{name}'; a vit_minimal config names one of the registered "
                         f"architectures: {', '.join(registered)}.")
    parts = parse_arch(name)
    return dict(attn_type=parts['attn'], use_mlp=parts['mlp'], depth=parts['depth'], num_heads=parts['heads'])


def registered_architecture(attn_type: str, use_mlp: bool, depth: int, num_heads: int,
                            registered: Sequence[str]) -> str:
    """The name a config writes for these keywords: the exact architecture where it is registered, else its family
    (``model_args`` then carry the differences, e.g. the depth)."""
    name = arch_name(attn_type, bool(use_mlp), depth, num_heads)
    return name if name in registered else arch_name(attn_type, bool(use_mlp), 6, 1)


def check_architecture(architecture: str, model_args: Mapping[str, Any], registered: Sequence[str]) -> None:
    """Refuse a config whose ``model_args`` describe another architecture than the ``architecture`` it names."""
    args = {**architecture_args(architecture, registered), **{k: model_args[k] for k in NAME_KEYWORDS if k in model_args}}
    described = registered_architecture(**args, registered=registered)
    if described != architecture:
        spelled = ', '.join(f'{k}={args[k]!r}' for k in NAME_KEYWORDS)
        raise ValueError(f"The config names the architecture '{architecture}', but its model_args ({spelled}) describe "
                         f"'{described}': one of the two is not the checkpoint's; fix architecture or model_args in "
                         f"config.json.")


def check_config_values(pretrained_cfg: Any) -> None:
    """A config read from a file (local-dir:, hf-hub:) must be valid: timm would otherwise drop the classifier
    of a checkpoint whose class count the config misstates and load the rest silently."""
    cfg = pretrained_cfg.to_dict() if hasattr(pretrained_cfg, 'to_dict') else pretrained_cfg
    if not isinstance(cfg, dict):
        return
    n = cfg.get('num_classes')
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f'The model config gives num_classes={n!r}; it must be an integer >= 0.')
