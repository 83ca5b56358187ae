"""Pretrained configs: what timm records about a tag's inputs and where an architecture's weights are.

A pretrained cfg (timm's ``PretrainedCfg``) of ``vit_minimal_<...>.<tag>`` holds the tag's preprocessing and
classes (``timm_minimal.models.datasets``), the paper, and, where trained weights ship inside the package
(``weights/<architecture>.<tag>.safetensors``), the file and its Hub repository ``timm-minimal/<architecture>.<tag>``.
"""
import hashlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from timm.data import ImageNetInfo
from timm.layers import to_2tuple

from .datasets import DATASETS
from .paper import PAPER_ARXIV, PAPER_TITLE

__all__ = ['WEIGHTS_DIR', 'WEIGHTS_INDEX', 'file_sha256', 'shipped_digests', 'check_shipped_file', 'HUB_ORG', 'RECIPE_TAGS', 'TAGS', 'RENAMED_TAGS', 'check_tag_spelling', 'check_tag', 'tags_with_weights', 'tag_dataset', 'weights_file_name', 'tag_geometry',
           'tag_for_geometry', 'dataset_label_names', 'describe_pretrained_cfg', 'pretrained_cfg_for', 'jsonable']


# A dataset's name is its tag (``.mnist``, ``.cifar10``): the paper's recipe. A recipe tag, in timm's order (the recipe
# first, the dataset last: ``augreg_in21k``, ``a1_in1k``), names weights trained on the same data at the same geometry
# with another recipe: ``<recipe>_<dataset>``. It maps to its dataset, and it is registered only for the architectures
# whose weights ship under it (the recipes: results/beyond_gpu.md).
RECIPE_TAGS: Dict[str, str] = {
    'mixup_cifar10': 'cifar10',  # the cifar10 recipe with mixup 0.8, cutmix 1.0 and random erasing 0.25
    'kd_cifar10': 'cifar10',  # mimetic initialisation, distilled from std_mlp_6x4.cifar10, no label smoothing
    'kd2_cifar10': 'cifar10',  # the same, distilled from the stronger std_mlp_6x4.mixup_cifar10 (compare timm's augreg2)
}
TAGS = tuple(DATASETS) + tuple(RECIPE_TAGS)
# The spellings of the recipe tags before they took timm's order, each refused with its new name.
RENAMED_TAGS: Dict[str, str] = {'cifar10_mixup': 'mixup_cifar10', 'cifar10_kd': 'kd_cifar10', 'cifar10_kd2': 'kd2_cifar10'}


def check_tag_spelling(tag: Optional[str]) -> None:
    """Refuse a recipe tag's earlier spelling (``.cifar10_kd2``) in one line that names the tag it now is."""
    if tag in RENAMED_TAGS:
        raise ValueError(f"the tag .{tag} is now .{RENAMED_TAGS[tag]} (timm's order: the recipe first, the dataset "
                         f"last); the weights are the same")


def check_tag(arch: str, tag: str, registered: List[str]) -> None:
    """Refuse a tag that ``arch`` does not have (``registered``: its ``<arch>.<tag>`` names), in timm's words and type
    with the tags it has, and which of them have weights."""
    check_tag_spelling(tag)
    tags = [name.split('.', 1)[1] for name in registered]
    if tag not in tags:
        raise RuntimeError(f'Invalid pretrained tag ({tag}) for {arch}: its tags are {", ".join(tags)}; with weights: '
                           f'{", ".join(tags_with_weights(arch, tags)) or "none"}.')


def tags_with_weights(arch: str, tags: Sequence[str] = TAGS) -> List[str]:
    """Those of ``tags`` whose weights of ``arch`` ship inside the package."""
    return [t for t in tags if (WEIGHTS_DIR / weights_file_name(arch, t)).is_file()]


def tag_dataset(tag: Optional[str]) -> Optional[str]:
    """The dataset of a pretrained tag (a dataset tag is its own); None for a tag that is not one of ``TAGS``."""
    return tag if tag in DATASETS else RECIPE_TAGS.get(tag)


def tag_geometry(tag: str) -> Dict[str, Any]:
    """``in_chans``, ``img_size`` and ``patch_size`` of the models of a pretrained tag."""
    return DATASETS[tag_dataset(tag)].geometry()


def tag_for_geometry(in_chans: int, img_size: Any, patch_size: Any) -> Optional[str]:
    """The pretrained tag whose models have this geometry (None if no tag has it)."""
    geometry = dict(in_chans=in_chans, img_size=to_2tuple(img_size), patch_size=to_2tuple(patch_size))
    for tag in DATASETS:
        g = tag_geometry(tag)
        if dict(g, img_size=to_2tuple(g['img_size']), patch_size=to_2tuple(g['patch_size'])) == geometry:
            return tag
    return None


def dataset_label_names(tag: Optional[str]) -> Optional[List[str]]:
    """Class names of a pretrained tag's dataset (``None`` for an unknown tag)."""
    if tag == 'in1k':
        return list(ImageNetInfo('imagenet-1k').label_descriptions())
    names = DATASETS[tag_dataset(tag)].label_names if tag_dataset(tag) else None
    return list(names) if names is not None else None


# Trained weights ship inside the package as weights/<architecture>.<tag>.safetensors; each is also
# published on the Hub as <HUB_ORG>/<architecture>.<tag>. Tags without a file have no weights.
WEIGHTS_DIR = Path(__file__).parent / 'weights'
HUB_ORG = 'timm-minimal'
# The SHA-256 of each shipped file, as `sha256sum` writes it (`sha256sum -c SHA256SUMS` checks them in that folder):
# the digests the model cards record, the weights each card measured (scripts/refresh_cards.py writes it from them).
WEIGHTS_INDEX = WEIGHTS_DIR / 'SHA256SUMS'


def file_sha256(path: Union[str, Path]) -> str:
    """The SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()


def shipped_digests(index: Path = WEIGHTS_INDEX) -> Dict[str, str]:
    """File name -> SHA-256 of every shipped weights file, from the index (empty where there is none)."""
    if not index.is_file():
        return {}
    digests = {}
    for line in index.read_text(encoding='utf-8').splitlines():
        digest, _, name = line.partition('  ')
        if line.strip():
            digests[name] = digest
    return digests


def check_shipped_file(path: Path) -> Optional[str]:
    """The SHA-256 of a weights file of the package, refused where it is not the one its model card measured (the
    index's); None for a file outside the package's weights folder, which has no card here."""
    path = Path(path)
    if path.resolve().parent != WEIGHTS_DIR.resolve():
        return None
    want, got = shipped_digests().get(path.name), file_sha256(path)
    if want != got:
        raise ValueError(f'The weights file {path} has the SHA-256 {got[:16]}..., but its model card measured '
                         + (f'{want[:16]}...' if want else f'no such file ({WEIGHTS_INDEX.name} has no line for it)')
                         + ': it is not the checkpoint the card describes; reinstall the package.')
    return got

# Keys of a timm pretrained cfg that say where weights came from or what the checkpoint's head is,
# not how its inputs are prepared.
_SOURCE_KEYS = ('url', 'file', 'hf_hub_id', 'hf_hub_filename', 'source', 'state_dict', 'architecture',
                'num_classes', 'label_names', 'label_descriptions')


def weights_file_name(arch: str, tag: str) -> str:
    """The file name of an architecture's weights for a tag, in the package and on the Hub repository's name."""
    return f'{arch}.{tag}.safetensors'


def _weights(arch: str, dataset: str) -> Dict[str, Any]:
    path = WEIGHTS_DIR / weights_file_name(arch, dataset)
    return dict(file=str(path), hf_hub_id=f'{HUB_ORG}/{arch}.{dataset}') if path.is_file() else {}


def _cfg(dataset: str, **kwargs) -> Dict[str, Any]:
    """timm's pretrained cfg of a tag (``kwargs``: where its weights are)."""
    return {
        'url': '',
        'pool_size': None,
        'crop_mode': 'center',
        'fixed_input_size': True,
        'first_conv': 'patch_embed.proj',
        'classifier': 'head',
        'license': 'apache-2.0',
        'paper_name': PAPER_TITLE,
        'paper_ids': PAPER_ARXIV,
        **DATASETS[dataset].preprocessing(),
        **kwargs,
    }


def describe_pretrained_cfg(cfg: Dict[str, Any], **changes: Any) -> Dict[str, Any]:
    """How a model's inputs are prepared, as a config file records it: a pretrained cfg without the keys
    of where its weights came from, with ``changes`` applied, JSON-ready (lists, no callables)."""
    out = {k: v for k, v in {**cfg, **changes}.items() if k not in _SOURCE_KEYS and not callable(v)}
    return jsonable(out)


def pretrained_cfg_for(in_chans: int, img_size: Any, patch_size: Any) -> Dict[str, Any]:
    """The preprocessing of the tag with this geometry, else plain [0, 1] -> [-1, 1] at that size."""
    tag = tag_for_geometry(in_chans, img_size, patch_size)
    if tag is not None:
        return describe_pretrained_cfg(_cfg(tag), tag=tag)
    img_size = to_2tuple(img_size)
    return describe_pretrained_cfg(
        _cfg('mnist'), input_size=(in_chans, img_size[0], img_size[1]), mean=(0.5,) * in_chans,
        std=(0.5,) * in_chans)


def jsonable(value: Any) -> Any:
    """Tuples to lists, recursively (the form a config has after a JSON round trip)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
