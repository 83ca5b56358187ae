"""What a weights file must be before a model is built for it or loads it.

A checkpoint's ``config.json`` decides the size of the model timm builds; the weights file beside it is only
read afterwards. A config that misstates the depth or width would build a model of any size before the
mismatch shows. So the safetensors header (names, shapes and dtypes, read without the tensors) is checked
against the config first; the values are checked for non-finite numbers when they are loaded.

Some keywords change what a model computes without changing the shape of any tensor (``FUNCTION_KEYWORDS``: the
number of heads, the position embedding, the pooling a kept head was trained on). Every weights file this package
writes records them in its safetensors metadata (``weights_record``), and a model that loads such a file is checked
against the record (``check_recorded_keywords``). A file without the record (timm's own, a third party's, or one whose
metadata a copy dropped) loads with a warning that its head count cannot be checked.
"""
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from huggingface_hub import try_to_load_from_cache
from safetensors import safe_open
from safetensors.torch import save

__all__ = ['weights_file', 'head_classes', 'check_weights_fit', 'check_finite_weights', 'FUNCTION_KEYWORDS',
           'RECORD_KEY', 'loaded_weights_file', 'weights_record', 'save_weights_file', 'recorded_keywords', 'check_recorded_keywords']

_FLOAT_DTYPES = ('F16', 'BF16', 'F32', 'F64')
_BLOCK = re.compile(r'^(?:[\w.]*\.)?blocks\.(\d+)\.')
# the keywords that change the function while every tensor keeps its shape; the metadata key that records them
FUNCTION_KEYWORDS = ('num_heads', 'pos_embed', 'global_pool')
RECORD_KEY = 'timm_minimal.function_keywords'


def _cfg_fields(pretrained_cfg: Any) -> Mapping[str, Any]:
    """A pretrained cfg's fields: a dict's, or a ``PretrainedCfg``'s."""
    return pretrained_cfg if isinstance(pretrained_cfg, Mapping) else getattr(pretrained_cfg, '__dict__', {})


def weights_file(pretrained_cfg: Any) -> Optional[Path]:
    """The safetensors file a pretrained cfg of a local folder or file points to, where it exists."""
    file = _cfg_fields(pretrained_cfg).get('file')
    if not file:
        return None
    path = Path(file)
    if path.is_dir():
        path = path / 'model.safetensors'
    return path if path.suffix == '.safetensors' and path.is_file() else None


def loaded_weights_file(pretrained_cfg: Any) -> Optional[Path]:
    """The safetensors file a model built from ``pretrained_cfg`` loaded: a local folder's or file's, or the Hub
    cache's copy of ``hf_hub_id``'s ``model.safetensors`` (None where there is none)."""
    path = weights_file(pretrained_cfg)
    cfg = _cfg_fields(pretrained_cfg)
    if path is not None or not cfg.get('hf_hub_id'):
        return path
    repo_id, _, revision = str(cfg['hf_hub_id']).partition('@')
    found = try_to_load_from_cache(repo_id, 'model.safetensors', revision=revision or None)
    return Path(found) if isinstance(found, str) else None


def _read_header(path: Path) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """A safetensors file's header, read without the tensors: each tensor's (shape, dtype), and the metadata."""
    try:
        with safe_open(str(path), 'pt') as f:
            tensors = {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}
            return tensors, dict(f.metadata() or {})
    except Exception as e:  # noqa: BLE001 (safetensors raises its own error type for a corrupt header)
        raise ValueError(f'Cannot read the weights file {path}: {e} (a truncated or corrupted safetensors file).') from e


def _header(path: Path) -> Dict[str, Any]:
    return _read_header(path)[0]


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


def weights_record(model_kwargs: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    """The safetensors metadata a weights file of a model built with ``model_kwargs`` carries; none for a model
    that is not a ``VisionTransformerMinimal`` (None: another timm model, which has no such keywords)."""
    if model_kwargs is None:
        return {}
    return {RECORD_KEY: json.dumps({k: model_kwargs[k] for k in FUNCTION_KEYWORDS}, sort_keys=True)}


def save_weights_file(tensors: Mapping[str, torch.Tensor], path: Path, metadata: Mapping[str, str]) -> None:
    """``tensors`` as a safetensors file with ``metadata`` in sorted order, so that the same weights and metadata
    give the same bytes (safetensors orders the metadata at random), written in full or not at all."""
    raw = save(dict(tensors), metadata=dict(metadata))
    size = int.from_bytes(raw[:8], 'little')
    header = json.loads(raw[8:8 + size])
    header['__metadata__'] = dict(sorted(header.get('__metadata__', {}).items()))
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)  # safetensors pads its header to 8 bytes
    path = Path(path)
    tmp = path.with_name(f'.{path.name}.tmp')
    tmp.write_bytes(len(text).to_bytes(8, 'little') + text + raw[8 + size:])
    os.replace(tmp, path)


def recorded_keywords(path: Path) -> Dict[str, Any]:
    """The function keywords a weights file records ({} for a file without the record)."""
    return _keywords_of(path, _read_header(path)[1])


def _keywords_of(path: Path, metadata: Mapping[str, str]) -> Dict[str, Any]:
    text = metadata.get(RECORD_KEY)
    if text is None:
        return {}
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise ValueError(f'The weights file {path} has an unreadable {RECORD_KEY} record {text[:80]!r}; '
                         f'it must be a JSON object of {", ".join(FUNCTION_KEYWORDS)}.')
    return {k: v for k, v in record.items() if k in FUNCTION_KEYWORDS}


def check_recorded_keywords(path: Path, model_kwargs: Mapping[str, Any], num_classes: int) -> None:
    """Refuse a model whose function keywords differ from those its weights file records. The pooling counts only
    where the model keeps the weights' head (``num_classes`` as many as the file's head): a new head, or none,
    learns from the pooling it is given."""
    tensors, metadata = _read_header(path)  # one read of the header: the record and the head's shape
    if RECORD_KEY not in metadata:
        warnings.warn(f'The weights file {path} does not record the keywords it was trained with ({RECORD_KEY}: '
                      f'{", ".join(FUNCTION_KEYWORDS)}), so num_heads={model_kwargs.get("num_heads")!r} cannot be '
                      f'checked against it: the same tensors split into other heads compute another function.',
                      UserWarning, stacklevel=3)
    record = _keywords_of(path, metadata)
    if 'global_pool' in record:
        head = tensors.get('head.weight', ((None,), None))[0]
        if not num_classes or head[0] != num_classes:
            record.pop('global_pool')
    wrong = [k for k, v in record.items() if model_kwargs.get(k) != v]
    if wrong:
        asked = ', '.join(f'{k}={model_kwargs.get(k)!r}' for k in wrong)
        trained = ', '.join(f'{k}={record[k]!r}' for k in wrong)
        raise ValueError(f'The model asks for {asked} but the weights file {path} was trained with {trained}: the '
                         f'same tensors would compute another function. Fix the config (model_args) or the keyword '
                         f'arguments to {trained}.')
