"""What a weights file must be before a model is built for it or loads it.

A checkpoint's ``config.json`` decides the size of the model timm builds; the weights file beside it is only
read afterwards. A config that misstates the depth or width would build a model of any size before the
mismatch shows. So the safetensors header (names, shapes and dtypes, read without the tensors) is checked
against the config first; the values are checked for non-finite numbers when they are loaded.
"""
import re
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import torch

__all__ = ['weights_file', 'head_classes', 'check_weights_fit', 'check_finite_weights']

_FLOAT_DTYPES = ('F16', 'BF16', 'F32', 'F64')
_BLOCK = re.compile(r'^(?:[\w.]*\.)?blocks\.(\d+)\.')


def weights_file(pretrained_cfg: Any) -> Optional[Path]:
    """The safetensors file a pretrained cfg of a local folder or file points to, where it exists."""
    cfg = pretrained_cfg if isinstance(pretrained_cfg, Mapping) else getattr(pretrained_cfg, '__dict__', {})
    file = cfg.get('file')
    if not file:
        return None
    path = Path(file)
    if path.is_dir():
        path = path / 'model.safetensors'
    return path if path.suffix == '.safetensors' and path.is_file() else None


def _header(path: Path) -> Dict[str, Any]:
    from safetensors import safe_open
    try:
        with safe_open(str(path), 'pt') as f:
            return {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}
    except Exception as e:  # noqa: BLE001 (safetensors raises its own error type for a corrupt header)
        raise ValueError(f'Cannot read the weights file {path}: {e} (a truncated or corrupted safetensors file).') from e


def head_classes(kwargs: Mapping[str, Any]) -> Optional[int]:
    """The classes the weights' head must have: the config's ``num_classes`` when the model keeps that head; None
    when ``num_classes`` asks for another count (timm then replaces the head with a new one)."""
    cfg = kwargs.get('pretrained_cfg')
    cfg = cfg.to_dict() if hasattr(cfg, 'to_dict') else cfg if isinstance(cfg, dict) else {}
    classes = cfg.get('num_classes')
    return classes if kwargs.get('num_classes', classes) == classes else None


def check_weights_fit(path: Path, depth: int, embed_dim: int, num_classes: Optional[int] = None) -> None:
    """Refuse a weights file whose depth, width, classes (``num_classes``: the count the config says the weights
    have; None to leave the head to a new one) or dtypes differ from what the config asks for, before building."""
    header = _header(path)
    not_float = sorted(k for k, (_, dtype) in header.items() if dtype not in _FLOAT_DTYPES)
    if not_float:
        dtypes = sorted({header[k][1] for k in not_float})
        raise ValueError(f'The weights file {path} holds tensors that are not floating point ({", ".join(not_float[:3])}'
                         f'{", ..." if len(not_float) > 3 else ""}: {", ".join(dtypes)}); a vit_minimal model loads '
                         f'float weights only.')
    blocks = {int(m.group(1)) for k in header for m in [_BLOCK.match(k)] if m}
    found_depth = max(blocks) + 1 if blocks else 0
    if found_depth and found_depth != depth:
        raise ValueError(f'The config asks for depth={depth} but the weights file {path} holds {found_depth} blocks; '
                         f'fix the config (model_args) or use the matching weights.')
    patch = next((shape for k, (shape, _) in header.items() if k.endswith('patch_embed.proj.weight')), None)
    if patch is not None and patch[0] != embed_dim:
        raise ValueError(f'The config asks for embed_dim={embed_dim} but the weights file {path} has width '
                         f'{patch[0]} (patch_embed.proj.weight {list(patch)}); fix the config or use the matching weights.')
    head = header.get('head.weight', (None,))[0]
    if num_classes is not None and head is not None and head[0] != num_classes:
        raise ValueError(f'The config says num_classes={num_classes} but the weights file {path} has a {head[0]}-class '
                         f'head (head.weight {list(head)}); fix num_classes in the config, or pass num_classes=N '
                         f'to replace the head with a new one of N classes.')


def check_finite_weights(state_dict: Mapping[str, torch.Tensor]) -> None:
    """Refuse weights with NaN or infinite values, naming the tensors."""
    bad = sorted(k for k, v in state_dict.items()
                 if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all()))
    if bad:
        raise ValueError(f'The weights hold non-finite values (NaN or inf) in {", ".join(bad[:3])}'
                         f'{", ..." if len(bad) > 3 else ""}: refusing to load them.')
