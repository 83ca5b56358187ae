"""The zoo as Hub repositories: one folder per shipped checkpoint, written from what ships, and pushed.

    timm-minimal-publish --zoo --output hub-zoo                     # a repository folder per checkpoint, offline
    timm-minimal-publish --zoo --output hub-zoo --only '*cifar10*'  # those whose name matches
    timm-minimal-publish --zoo --output hub-zoo --push              # and upload them, one line each

A shipped checkpoint is a pretrained tag whose weights ship inside the package
(``timm_minimal/models/weights/<architecture>.<tag>.safetensors``) with its card in ``model_cards/<architecture>.<tag>.md``;
its repository ``timm-minimal/<architecture>.<tag>`` is what its pretrained cfg's ``hf_hub_id`` names. Each folder holds
what ``repo_files`` writes for any published model: the weights, ``config.json`` (timm's ``hf-hub:`` and transformers),
the remote code, ``preprocessor_config.json``, the card as ``README.md`` and the license. A push uploads a folder only
where the repository's files differ from it, so a second push of an unchanged zoo uploads nothing and an interrupted
push resumes where it stopped.

``pretrained_folder(name)`` writes the same folder (without the card) into the user's cache, so that transformers loads
a shipped checkpoint by its name offline: ``AutoModelForImageClassification.from_pretrained(pretrained_folder(name))``.
"""
import fnmatch
import logging
import os
import shutil
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

import timm
import torch
import yaml
from huggingface_hub import HfApi, ModelCard, constants
from huggingface_hub.errors import RepositoryNotFoundError
from huggingface_hub.utils import HFValidationError, validate_repo_id
from safetensors.torch import load_file

from ...cli import UsageError
from ...models import pretrained
from ...models.pretrained import HUB_ORG, WEIGHTS_INDEX, check_shipped_file, file_sha256
from ...models import vit_minimal  # noqa: F401  (registers the architectures and their pretrained cfgs)
from ..staging import refusal, staged_folder, unrecorded_entries
from ...models.weights_check import check_finite_weights
from .cards import CARD_LIBRARY, card_weights_sha256
from ...machine import default_cache_dir

__all__ = ['ZooError', 'shipped_names', 'select_names', 'check_zoo', 'write_zoo', 'repo_files', 'pretrained_folder',
           'push_zoo', 'hub_snippets', 'LICENSE_FILE']

_logger = logging.getLogger(__name__)

LICENSE_FILE = 'LICENSE'


class ZooError(UsageError):
    """A zoo that cannot be written as asked, with what is wrong and what is allowed."""


def shipped_names() -> List[str]:
    """``<architecture>.<tag>`` of every checkpoint whose weights ship inside the package, sorted."""
    names = []
    for name in timm.list_pretrained('vit_minimal_*'):
        cfg = timm.models.get_pretrained_cfg(name)
        if cfg is not None and cfg.file and Path(cfg.file).is_file():
            names.append(name)
    return sorted(names)


def select_names(cards_dir: Path, only: Optional[Sequence[str]] = None) -> List[str]:
    """The checkpoints to publish: those with weights or a card, matching one of ``only`` (fnmatch patterns, default
    all); a checkpoint with weights and no card, or a card and no weights, is refused by name."""
    cards_dir = Path(cards_dir)
    if not cards_dir.is_dir():
        raise ZooError(f'--cards {cards_dir}: no such folder; run from the root of a checkout of this repository '
                       f'(model_cards/) or name the folder of the model cards')
    cards = {p.name[:-len('.md')] for p in cards_dir.glob('vit_minimal_*.md')}
    weights = set(shipped_names())
    names = sorted(weights | cards)
    if only:
        for pattern in only:
            if not fnmatch.filter(names, pattern):
                raise ZooError(f"--only {pattern}: matches no checkpoint; the zoo's are {', '.join(names)}")
        names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in only)]
    no_card = [n for n in names if n not in cards]
    no_weights = [n for n in names if n not in weights]
    if no_card or no_weights:
        why = ([f'no card in {cards_dir} for {", ".join(no_card)}'] if no_card else []) + \
              ([f'no weights in the package for {", ".join(no_weights)}'] if no_weights else [])
        raise ZooError(f'{"; ".join(why)}: a checkpoint is published with both; nothing was written')
    return names


def repo_files(model: Any, folder: Path, card: Optional[str] = None) -> None:
    """The files of a Hub repository of a timm ``model`` in ``folder``: ``model.safetensors``, ``config.json``, the
    remote code, ``preprocessor_config.json``, the license and, given, the card as ``README.md``; checked: timm
    (``local-dir:``) and transformers must read back the model's logits."""
    from ...models.modeling_vit_minimal import VitMinimalForImageClassification  # lazy: imports transformers
    folder = Path(folder)
    VitMinimalForImageClassification.from_timm(model).eval().save_pretrained(folder)  # the processor config too
    with resources.as_file(resources.files(__package__).joinpath(LICENSE_FILE)) as license_file:
        shutil.copyfile(license_file, folder / LICENSE_FILE)
    if card is not None:
        (folder / 'README.md').write_text(card, encoding='utf-8')
    x = torch.randn(2, *model.pretrained_cfg['input_size'], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model.eval()(x)
        via_timm = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()(x)
        via_hf = VitMinimalForImageClassification.from_pretrained(folder).eval()(pixel_values=x).logits
    for library, logits in (('timm', via_timm), ('transformers', via_hf)):
        if not torch.allclose(logits, ref, atol=1e-5, rtol=1e-5):
            raise RuntimeError(f'the repository folder {folder} gives other logits in {library} than the model.')


def check_zoo(out_dir: Path, names: Sequence[str], cards_dir: Path, namespace: str) -> Dict[str, str]:
    """Refuse, before anything is written, a zoo that ``write_zoo`` and a push could not finish as asked: an output
    that is not a writable folder or holds a folder the zoo did not write; a card that is not UTF-8, has no front
    matter of its library and result, or records no SHA-256 of its weights; weights whose SHA-256 is not the one their
    card measured, or that hold non-finite values; a namespace that makes no repository id. The SHA-256 of each
    checkpoint's weights otherwise."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ZooError(f'--output {out_dir} exists and is not a folder; nothing was written')
    existing = next(p for p in (out_dir, *out_dir.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ZooError(f'--output {out_dir}: {existing} is not writable; nothing was written')
    digests = {}
    for name in names:
        try:
            validate_repo_id(f'{namespace}/{name}')
        except HFValidationError as e:
            raise ZooError(f"--namespace '{namespace}' makes no Hub repository id of {namespace}/{name}: {e}; nothing "
                           f"was written") from None
        why = refusal(out_dir / name, overwrite=True)
        if why:
            raise ZooError(f'{why}; nothing was written')
        digests[name] = _check_card_and_weights(name, Path(cards_dir) / f'{name}.md')
    return digests


def _check_card_and_weights(name: str, card_path: Path) -> str:
    """The SHA-256 of a shipped checkpoint's weights, refused unless its card is readable and measured those weights,
    the package's index agrees, and the weights are finite."""
    try:
        text = card_path.read_bytes().decode('utf-8')
        card = ModelCard(text, ignore_metadata_errors=False)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as e:
        why = ' '.join(str(e).split())[:200]
        raise ZooError(f'{card_path}: not a model card in UTF-8 with a readable front matter ({why}); nothing was '
                       f'written') from None
    if card.data.library_name != CARD_LIBRARY or not card.data.eval_results:
        raise ZooError(f'{card_path}: its front matter gives no library_name: {CARD_LIBRARY} or no model-index result; '
                       f'nothing was written')
    try:
        want = card_weights_sha256(text, str(card_path))
    except ValueError as e:
        raise ZooError(f'{e}; nothing was written') from None
    weights = Path(timm.models.get_pretrained_cfg(name).file)
    got = file_sha256(weights)
    if got != want:
        raise ZooError(f'{weights}: its SHA-256 is {got[:16]}..., but its card {card_path} measured {want[:16]}...: '
                       f'these are not the weights the card describes; nothing was written')
    if pretrained.shipped_digests().get(weights.name) != want:
        raise ZooError(f'{WEIGHTS_INDEX} does not give {weights.name} the SHA-256 its card records; run python '
                       f'scripts/refresh_cards.py; nothing was written')
    try:
        check_finite_weights(load_file(str(weights)))
    except ValueError as e:
        raise ZooError(f'{weights}: {e}; nothing was written') from None
    return want


def write_zoo(out_dir: Path, names: Sequence[str], cards_dir: Path, namespace: str = HUB_ORG) -> List[Path]:
    """``out_dir/<name>`` for each name: a complete Hub repository folder, written whole or not at all, whose weights are
    those its card measured. A folder an earlier run of the zoo wrote is replaced; any other folder of that name, and
    everything else ``check_zoo`` refuses for a push to ``namespace``, is refused before the first write."""
    digests = check_zoo(out_dir, names, cards_dir, namespace)
    folders = []
    for name in names:
        out = Path(out_dir) / name
        with staged_folder(out, overwrite=True, record=True, error=ZooError) as stage:
            card = (Path(cards_dir) / f'{name}.md').read_text(encoding='utf-8')
            repo_files(timm.create_model(name, pretrained=True), stage, card)
            if file_sha256(stage / 'model.safetensors') != digests[name]:
                raise ZooError(f'{out}: the written model.safetensors is not the file its card measured')
        _logger.info(f'wrote {out}')
        folders.append(out)
    return folders


def pretrained_folder(name: str) -> Path:
    """A folder that transformers loads ``name``, a shipped checkpoint (``vit_minimal_sym_6x4.kd2_cifar10``), from,
    offline: its Hub repository's files without the card, made on first use in the user's cache and kept there
    under the digest of the weights it holds. Every call checks the folder's weights against the SHA-256 its card
    recorded (the package's weights index): a folder missing a file is written again; one whose files were changed
    after it was written is refused in one line, and left as it was."""
    cfg = timm.models.get_pretrained_cfg(name) if name in shipped_names() else None
    if cfg is None:
        raise ValueError(f"no shipped checkpoint is named '{name}'; the shipped ones: {', '.join(shipped_names())}")
    digest = check_shipped_file(Path(cfg.file))  # the package's own file is the one its card measured
    out = default_cache_dir() / 'pretrained' / f'{name}-{digest[:16]}'
    if _holds_weights(out, digest):
        return out
    changed = unrecorded_entries(out) if out.is_dir() else []
    if changed:
        raise ValueError(f'the cached folder {out} of {name} does not hold the shipped weights (SHA-256 '
                         f'{digest[:16]}...) complete, and files were changed or added there after it was written '
                         f'({", ".join(changed)}); remove the folder, and the next call writes it again')
    with staged_folder(out, overwrite=True, record=True) as stage:  # whole or not at all; a second writer: the same
        repo_files(timm.create_model(name, pretrained=True), stage)
    if not _holds_weights(out, digest):
        raise RuntimeError(f'the folder {out} was written with other weights than the shipped {name}')
    return out


def _holds_weights(folder: Path, digest: str) -> bool:
    """Whether a repository folder is complete and its ``model.safetensors`` has the SHA-256 ``digest``."""
    weights = folder / 'model.safetensors'
    complete = all((folder / f).is_file() for f in ('config.json', 'preprocessor_config.json')) and weights.is_file()
    return complete and file_sha256(weights) == digest


def push_zoo(folders: Iterable[Path], namespace: str, private: bool = False, token: Optional[str] = None,
             endpoint: Optional[str] = None) -> Dict[str, str]:
    """Upload each folder to ``<namespace>/<folder name>``, one line each. huggingface_hub's ``upload_folder`` sends
    only the files whose content the repository does not hold already, and makes no commit where none differs.
    What happened to each repository: 'created', 'updated' or 'unchanged' (its head commit as it was)."""
    api = HfApi(endpoint=endpoint or constants.ENDPOINT, token=token)
    done = {}
    for folder in folders:
        repo_id = f'{namespace}/{Path(folder).name}'
        try:
            before: Optional[str] = api.repo_info(repo_id).sha
        except RepositoryNotFoundError:
            before = None
            api.create_repo(repo_id, private=private, exist_ok=True, repo_type='model')
        info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, commit_message=f'Upload {Path(folder).name}')
        if before is not None and info.oid == before:
            _logger.info(f'unchanged {repo_id}')
            done[repo_id] = 'unchanged'
            continue
        done[repo_id] = 'created' if before is None else 'updated'
        what = 'all files' if before is None else 'the files that differ'
        _logger.info(f'pushed {repo_id} ({what}): {info.commit_url}')
    return done


def hub_snippets(repo_id: str, library_name: Optional[str], tags: Sequence[str], pipeline_tag: Optional[str],
                 files: Sequence[str], config: Dict[str, Any]) -> List[str]:
    """The code the Hub's "Use this model" button shows for a repository, by the rule of the Hub's own snippets
    (huggingface.js, ``model-libraries-snippets.ts``) for the libraries a card here can name: ``timm`` gives
    ``timm.create_model("hf_hub:<id>")``; ``transformers`` gives a pipeline and the Auto classes its config maps
    (``auto_map``), with ``trust_remote_code=True`` where the tags hold ``custom_code``."""
    if library_name == 'timm':
        return [f'import timm\n\nmodel = timm.create_model("hf_hub:{repo_id}", pretrained=True)']
    if library_name != 'transformers':
        raise ValueError(f'no snippet is known for library_name {library_name!r}')
    remote = ', trust_remote_code=True' if 'custom_code' in tags else ''
    auto_map = config.get('auto_map') or {}
    auto_model = next((k for k in auto_map if k.startswith('AutoModelFor')), 'AutoModel')
    processor = 'AutoImageProcessor' if 'preprocessor_config.json' in files else None
    if processor:
        auto = (f'# Load model directly\nfrom transformers import {processor}, {auto_model}\n\n'
                f'processor = {processor}.from_pretrained("{repo_id}"{remote})\n'
                f'model = {auto_model}.from_pretrained("{repo_id}"{remote})')
    else:
        auto = (f'# Load model directly\nfrom transformers import {auto_model}\n'
                f'model = {auto_model}.from_pretrained("{repo_id}"{remote}, dtype="auto")')
    if pipeline_tag != 'image-classification':
        return [auto]
    pipe = (f'# Use a pipeline as a high-level helper\nfrom transformers import pipeline\n\n'
            f'pipe = pipeline("{pipeline_tag}", model="{repo_id}"{remote})\n'
            f'pipe("https://huggingface.co/datasets/huggingface/documentation-images/resolve/main/hub/parrots.png")')
    return [pipe, auto]
