"""Hugging Face configs of the registered architectures (the files under ``hf_configs/``).

``hf_configs/<architecture>/config.json`` is the ``config.json`` of a checkpoint of that
architecture with the default (``.mnist``) geometry: it loads with
``AutoConfig.from_pretrained('hf_configs/<architecture>')`` and describes the model to timm as well.
``scripts/generate_hf_configs.py`` writes them; ``tests/test_hf.py`` fails when they are out of date.
"""
import json
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union

from ...models.configuration_vit_minimal import VitMinimalConfig
from ...models.datasets import DATASETS
from ...models.vit_minimal import ARCHITECTURES

__all__ = ['hf_config_dict', 'hf_config_json', 'write_hf_configs', 'check_hf_configs', 'DEFAULT_TAG']

DEFAULT_TAG = 'mnist'
CONFIG_NAME = 'config.json'


def hf_config_dict(architecture: str, tag: str = DEFAULT_TAG) -> Dict:
    """The ``config.json`` content of ``architecture`` built for the pretrained ``tag``."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"Unknown architecture '{architecture}'; choose one of {', '.join(ARCHITECTURES)}.")
    if tag not in DATASETS:
        raise ValueError(f"Unknown tag '{tag}'; choose one of {', '.join(DATASETS)}.")
    config = VitMinimalConfig.from_timm(f'{architecture}.{tag}')
    config.architectures = ['VitMinimalForImageClassification']
    content = config.to_diff_dict()
    content.pop('transformers_version', None)  # these files describe the architecture, not the writer
    return content


def hf_config_json(architecture: str, tag: str = DEFAULT_TAG) -> str:
    return json.dumps(hf_config_dict(architecture, tag), indent=2, sort_keys=True) + '\n'


def write_hf_configs(out_dir: Union[str, Path], architectures: Optional[Iterable[str]] = None,
                     tag: str = DEFAULT_TAG) -> List[Path]:
    """Write ``<out_dir>/<architecture>/config.json`` for every registered architecture (or those given)."""
    out_dir = Path(out_dir)
    written = []
    for architecture in (ARCHITECTURES if architectures is None else architectures):
        path = out_dir / architecture / CONFIG_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(hf_config_json(architecture, tag), encoding='utf-8')
        written.append(path)
    return written


def check_hf_configs(directory: Union[str, Path], tag: str = DEFAULT_TAG) -> List[str]:
    """What differs between ``directory`` and freshly generated configs (empty when up to date)."""
    directory = Path(directory)
    problems = []
    for architecture in ARCHITECTURES:
        path = directory / architecture / CONFIG_NAME
        if not path.is_file():
            problems.append(f'missing: {architecture}/{CONFIG_NAME}')
        elif path.read_text(encoding='utf-8') != hf_config_json(architecture, tag):
            problems.append(f'out of date: {architecture}/{CONFIG_NAME}')
    if directory.is_dir():
        for entry in sorted(directory.iterdir()):
            if entry.name not in ARCHITECTURES:
                problems.append(f'not a registered architecture: {entry.name}')
    return problems
