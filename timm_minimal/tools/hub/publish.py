"""Turn a finished training run into a Hugging Face Hub repository, and upload it.

    timm-minimal-publish runs/mnist-sym --repo-id my-org/vit_minimal_sym_6x4.mnist --output hub/sym-mnist
    timm-minimal-publish runs/mnist-sym --repo-id my-org/vit_minimal_sym_6x4.mnist --push --private

The repository folder holds ``model.safetensors`` (plain timm keys), a ``config.json`` that timm
(``hf-hub:``/``local-dir:``) and transformers (``AutoModelForImageClassification``) both read,
``preprocessor_config.json``, the modeling code for ``trust_remote_code`` and a ``README.md`` model
card rendered from ``model_cards/template.md`` with huggingface_hub's ``ModelCard``. Every number
in the card is read from the run's ``metrics.jsonl`` and ``run.json``; a run that has not finished
an epoch gets no card. Uploading uses ``HfApi`` and honours ``HF_ENDPOINT`` and ``HF_TOKEN``.
"""
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import timm
import torch
import yaml
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, constants
from huggingface_hub.utils import HFValidationError, validate_repo_id
from safetensors.torch import load_file
from transformers.utils import logging as hf_logging

from ..benchmark import count_flops
from ...models.paper import PAPER_EPOCHS, TABLE1, TABLE2, VARIANTS
from ...models.pretrained import HUB_ORG, TAGS, file_sha256, tag_dataset, weights_file_name
from ...training.run.checkpoint import CONFIG_FILE, MODEL_FILE
from ...training.run.files import write_file_atomic
from ...training.run.folder import RunFolder
from ...training.run.record import Launch, RunRecord
from ...cli import Failure, UsageError, command
from .cli import RUN_OPTIONS, ZOO_OPTIONS, build_parser
from .cards import CARD_LIBRARY, CARD_TAGS, card_template
from .zoo import push_zoo, repo_files, select_names, write_zoo
from ..staging import staged_folder
from ..common import portable_command
from ...models.datasets import DatasetInfo, dataset_for_kind
from ...models.vit_minimal import ARCHITECTURES, MODEL_KEYWORDS

__all__ = ['RunInfo', 'read_run', 'export_run', 'render_card', 'push_folder', 'main']


ATTN_DESCRIPTIONS = {attn: v['long'] for attn, v in VARIANTS.items()}


class PublishError(UsageError):
    """A run folder that cannot be published, with what is wrong."""


@dataclass
class RunInfo:
    """What a finished run folder says about itself."""
    path: Path
    run: RunRecord
    metrics: List[Dict[str, Any]]
    checkpoint: Path
    recipe_tag: Optional[str] = None  # the tag the weights ship under, where it is not the run's own (--tag)

    @property
    def architecture(self) -> str:
        return self.run.architecture

    @property
    def tag(self) -> str:
        if self.recipe_tag:
            return self.recipe_tag
        model = self.run.model
        return model.split('.', 1)[1] if '.' in model else self.run.dataset['name']

    @property
    def dataset_kind(self) -> str:
        return self.run.dataset.get('kind', self.run.dataset['name'])

    @property
    def dataset_info(self) -> Optional[DatasetInfo]:
        """The record of a built-in dataset (None for an image folder or a timm dataset)."""
        return dataset_for_kind(self.dataset_kind)

    @property
    def dataset_name(self) -> str:
        return self.dataset_info.display_name if self.dataset_info else self.run.dataset['name']

    @property
    def last(self) -> Dict[str, Any]:
        return self.metrics[-1]

    @property
    def best(self) -> Dict[str, Any]:
        return max(self.metrics, key=lambda m: m['test_acc'])

    @property
    def last_launch(self) -> Launch:
        """The launch that ran the last epoch (device, precision, ...)."""
        return self.run.last_launch


def read_run(run_dir: Path, checkpoint: str = 'last') -> RunInfo:
    """Read ``run.json``, ``metrics.jsonl`` and the chosen checkpoint of a run folder."""
    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    for f in (folder.run_file, folder.metrics_file):
        if not f.is_file():
            raise PublishError(f'{run_dir} is not a training run folder: {f.name} is missing.')
    try:
        run, metrics = folder.read_record(), folder.read_metrics()
        portable_command(run.command, run.model)  # what the card prints: a shell line
    except ValueError as e:
        raise PublishError(f'{run_dir} cannot be read: {e}.') from None
    if not metrics:
        raise PublishError(f'{run_dir} has no finished epoch in metrics.jsonl: nothing measured to publish.')
    if run.status != 'finished':
        raise PublishError(f"{run_dir} has status '{run.status}', not 'finished': resume it to the end "
                           f'(timm-minimal-train --resume {run_dir}) before publishing.')
    if checkpoint not in ('last', 'best'):
        raise PublishError(f"checkpoint must be 'last' or 'best', got '{checkpoint}'.")
    ckpt = folder.checkpoint(checkpoint)
    if not (ckpt / MODEL_FILE).is_file() or not (ckpt / CONFIG_FILE).is_file():
        raise PublishError(f'{ckpt} holds no complete checkpoint (model.safetensors + config.json).')
    return RunInfo(run_dir, run, metrics, ckpt)


def _load_model(info: RunInfo):
    model = timm.create_model(f'local-dir:{info.checkpoint}', pretrained=True)
    return model.eval()


def _paper_rows(architecture: str, tag: str) -> List[Dict[str, Any]]:
    rows, seen = [], set()
    for row in TABLE1 + TABLE2:
        key = (row.train_acc, row.val_acc)
        if row.arch == architecture and row.dataset == tag and key not in seen:
            seen.add(key)
            params = row.params if row.params is not None else row.params_from_q
            rows.append(dict(table=f'Table {row.table}', params_str=f'{params:,}', train_loss=row.train_loss,
                             train_acc=row.train_acc, val_loss=row.val_loss, val_acc=row.val_acc))
    return rows


def _hardware(info: RunInfo) -> str:
    launch = info.last_launch
    device = str(launch.device)
    processes = launch.num_processes or 1
    kind = 'GPU' if 'cuda' in device else 'CPU'
    where = f'{processes} {kind} processes' if processes > 1 else f'one {kind}'
    return f'{where} ({launch.device_name})' if launch.device_name else where


def _eval_precision(info: RunInfo) -> Optional[str]:
    """The autocast precision the run's last evaluation ran in (its last launch's), None for fp32."""
    precision = info.last_launch.mixed_precision
    return None if precision in (None, 'no') else str(precision)


def _resolved_recipe(run: RunRecord) -> Dict[str, Any]:
    """The recipe's keys with the values the run actually used (command-line overrides applied)."""
    return {k: run.args.get(k, v) for k, v in (run.recipe_values or {}).items()}


def _card_data(info: RunInfo, repo_id: str, attn_type: str):
    """The card's metadata: library, tags, dataset and the last epoch's test accuracy as an eval result."""

    dataset_name, last = info.dataset_name, info.last
    return ModelCardData(
        library_name=CARD_LIBRARY,
        pipeline_tag='image-classification',
        license='apache-2.0',
        tags=[*CARD_TAGS, f'attn-{attn_type}'],
        datasets=[info.dataset_info.hub_id] if info.dataset_info else None,
        model_name=repo_id,
        eval_results=[EvalResult(
            task_type='image-classification', task_name='Image Classification',
            dataset_type=info.dataset_info.hub_id if info.dataset_info else info.dataset_kind,
            dataset_name=dataset_name, dataset_split=info.run.dataset.get('eval_split', 'test'),
            metric_type='accuracy', metric_name='Top-1 accuracy', metric_value=round(last['test_acc'], 2),
        )],
    )


def _comparison(paper_rows, last) -> str:
    """One sentence: the last epoch against the paper's validation accuracy (``PAPER_EPOCHS``), where it has one."""
    if not paper_rows:
        return 'The paper reports no result for this architecture on this dataset.'
    gap = last['test_acc'] - paper_rows[0]['val_acc']
    return (f'After {last["epoch"]} epoch{"s" if last["epoch"] != 1 else ""} this model is {abs(gap):.2f} points '
            f'{"below" if gap < 0 else "above"} the validation accuracy the paper reports after {PAPER_EPOCHS} epochs.')


def render_card(info: RunInfo, repo_id: str, model, weights_sha256: str, template: Optional[Path] = None,
                note: str = ''):
    """The model card of a run (``huggingface_hub.ModelCard``); every number comes from the run's files, and
    ``weights_sha256`` is the SHA-256 of the ``model.safetensors`` they were measured on."""

    arch, kind = info.architecture, info.dataset_kind
    dataset_name = info.dataset_name
    last = info.last
    args = model.init_kwargs
    card_data = _card_data(info, repo_id, args['attn_type'])
    name = f'{arch}.{info.tag}'
    paper_rows = _paper_rows(arch, kind)
    comparison = _comparison(paper_rows, last)
    versions = info.run.versions
    input_size = model.pretrained_cfg['input_size']
    patch = model.patch_embed.patch_size[0]
    return ModelCard.from_template(
        card_data,
        template_str=card_template(template),
        repo_id=repo_id,
        architecture=arch,
        dataset_name=dataset_name,
        attn_type=args['attn_type'],
        attn_description=ATTN_DESCRIPTIONS[args['attn_type']],
        use_mlp=args['use_mlp'],
        mlp_hidden_dim=args['mlp_hidden_dim'],
        depth=args['depth'],
        num_heads=args['num_heads'],
        embed_dim=args['embed_dim'],
        input_size=input_size,
        patch_size=patch,
        tokens=model.patch_embed.num_patches,
        params=sum(p.numel() for p in model.parameters()),
        flops=count_flops(model, model.pretrained_cfg['input_size']),
        test_samples=last.get('test_samples', info.run.dataset.get('eval_samples')),
        train_samples=info.run.dataset.get('train_samples_used') or info.run.dataset.get('train_samples'),
        last=last,
        best=info.best,
        paper_rows=paper_rows,
        comparison_note=comparison,
        weights_from=info.checkpoint.name,
        weights_sha256=weights_sha256,
        epochs=last['epoch'],
        command=portable_command(info.run.command, info.run.model),
        recipe=yaml.safe_dump(_resolved_recipe(info.run), sort_keys=False).strip(),
        versions=', '.join(f'{k} {v}' for k, v in versions.items()) or 'not recorded',
        hardware=_hardware(info),
        eval_precision=_eval_precision(info),
        wall_time=info.run.total_wall_time(info.metrics),
        launches=len(info.run.launches) or 1,
        note=note,
        dataset_note=(info.dataset_info.note if info.dataset_info and info.dataset_info.note else
                      f'Tested on the {dataset_name} {info.run.dataset.get("eval_split", "test")} split.'),
        num_classes=model.num_classes,
        teacher=info.run.teacher,
        shipped=name if repo_id == f'{HUB_ORG}/{name}' else None,  # the zoo's own repositories
    )


def export_run(run_dir: Path, out_dir: Path, repo_id: str, checkpoint: str = 'last',
               card_copy: Optional[Path] = None, ship_weights: Optional[Path] = None, note: str = '',
               tag: Optional[str] = None) -> Path:
    """Write the Hub repository folder of a finished run and check that both libraries read it back.

    ``ship_weights`` (a maintainer step): also copy the weights into this folder, a checkout's
    ``timm_minimal/models/weights``, as ``<architecture>.<tag>.safetensors``; the installed package is never written.
    ``tag``: the tag the card names and the weights ship under, a recipe tag of the run's dataset
    (``models.pretrained.RECIPE_TAGS``); by default the run's own.
    """
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise PublishError(f"--repo-id '{repo_id}' is not a Hub repository id (owner/name): {e}") from e
    info = read_run(run_dir, checkpoint)
    if tag is not None:
        if tag_dataset(tag) is None or tag_dataset(tag) != tag_dataset(info.tag):
            raise PublishError(f'--tag {tag}: a run on {info.run.dataset["name"]} ships under its dataset\'s tags '
                               f'({", ".join(t for t in TAGS if tag_dataset(t) == tag_dataset(info.tag)) or "none"}).')
        info = replace(info, recipe_tag=tag)
    if ship_weights is not None and not Path(ship_weights).is_dir():
        raise PublishError(f'--ship-weights {ship_weights}: no such folder; run it from the root of a checkout of '
                           f'this repository (timm_minimal/models/weights/) or name the weights folder.')
    if ship_weights and info.architecture not in ARCHITECTURES:
        raise PublishError(f"the run's architecture '{info.architecture}' is not a registered vit_minimal "
                           f"architecture; only those ship inside the package.")
    # a keyword that only sets the starting point (weight_init) leaves the architecture the registered one
    overrides = {k: v for k, v in (info.run.model_kwargs or {}).items() if k in MODEL_KEYWORDS}
    if ship_weights and (overrides or tag_dataset(info.tag) is None):
        raise PublishError(f'only a registered architecture with a registered tag ({", ".join(TAGS)}) and no '
                           f'model overrides can ship as {info.architecture}.{info.tag}; this run has '
                           f'model_kwargs={overrides}.')
    out_dir = Path(out_dir)
    if card_copy is not None and Path(card_copy).is_dir():
        raise PublishError(f'--card-copy {card_copy} is a folder; name the file to write, e.g. '
                           f'{Path(card_copy) / "README.md"}')
    files_above = [p for p in Path(card_copy).parents if p.exists() and not p.is_dir()] if card_copy else []
    if files_above:
        raise PublishError(f'--card-copy {card_copy}: {files_above[0]} is a file, not a folder; name a file in a folder')
    model = _load_model(info)
    with staged_folder(out_dir, error=PublishError) as stage:
        _write_repo_folder(info, model, stage, repo_id, note)
    if card_copy is not None:
        Path(card_copy).parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(card_copy, lambda tmp: shutil.copyfile(out_dir / 'README.md', tmp))
    if ship_weights:
        target = Path(ship_weights) / weights_file_name(info.architecture, info.tag)
        write_file_atomic(target, lambda tmp: shutil.copyfile(out_dir / MODEL_FILE, tmp))
    return out_dir


def _write_repo_folder(info: RunInfo, model, folder: Path, repo_id: str, note: str) -> None:
    """The Hub repository files of a run's model in ``folder`` (``zoo.repo_files``), its card rendered from the run."""
    classes = info.run.dataset.get('classes')
    if classes and len(classes) == model.num_classes:
        model.pretrained_cfg = dict(model.pretrained_cfg, label_names=list(classes))
    repo_files(model, folder)
    card = render_card(info, repo_id, model, file_sha256(folder / MODEL_FILE), note=note)
    (folder / 'README.md').write_text(str(card), encoding='utf-8')


def push_folder(folder: Path, repo_id: str, private: bool = False, revision: Optional[str] = None,
                token: Optional[str] = None, commit_message: Optional[str] = None,
                endpoint: Optional[str] = None) -> str:
    """Create the repo (if needed) and upload the folder; returns the commit URL.

    ``endpoint`` defaults to ``HF_ENDPOINT`` and ``token`` to ``HF_TOKEN`` / the saved login.
    """
    api = HfApi(endpoint=endpoint or constants.ENDPOINT, token=token)
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type='model')
    if revision and revision != 'main':
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    info = api.upload_folder(
        folder_path=str(folder), repo_id=repo_id, revision=revision,
        commit_message=commit_message or f'Upload {Path(folder).name}')
    return info.commit_url


def written_from(out: Path, run_dir: Path, checkpoint: str) -> bool:
    """Whether ``out`` is a repository folder this tool wrote from ``checkpoint`` of the run in ``run_dir``: its card
    and config are there, and its weights are that checkpoint's, tensor for tensor."""
    weights, source = out / MODEL_FILE, RunFolder(run_dir).checkpoint(checkpoint) / MODEL_FILE
    if not all(f.is_file() for f in (weights, source, out / CONFIG_FILE, out / 'README.md')):
        return False
    try:
        a, b = load_file(str(weights)), load_file(str(source))
    except Exception:  # noqa: BLE001 (not a safetensors file: not ours)
        return False
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _check_arguments(args) -> None:
    """A run or --zoo, with the options that go with it; else a one-line usage error."""
    defaults = build_parser()

    def given(options):
        return [f'--{k.replace("_", "-")}' for k in options if getattr(args, k) != defaults.get_default(k)]
    if args.zoo:
        if args.run is not None:
            raise UsageError(f'--zoo publishes the checkpoints that ship with the package; it takes no run folder '
                             f'({args.run})')
        run_options = given(RUN_OPTIONS)
        if run_options:
            raise UsageError(f'--zoo publishes the checkpoints that ship with the package; {", ".join(run_options)} '
                             f'{"goes" if len(run_options) == 1 else "go"} with a run folder')
        if args.output is None:
            raise UsageError('--zoo needs --output DIR, the folder that gets one repository folder per checkpoint')
        return
    if args.run is None:
        raise UsageError('name a finished training run folder, or pass --zoo to publish the shipped checkpoints')
    if args.repo_id is None:
        raise UsageError('--repo-id is required with a run folder (e.g. my-org/vit_minimal_sym_6x4.mnist)')
    if given(ZOO_OPTIONS):
        raise UsageError('--only, --namespace and --cards go with --zoo; a run is published to its --repo-id')


def _push_failed(e: Exception, what: str, remedy: str) -> Failure:
    """One line for a push that failed: where it went, the client's error, what stands and how to go on."""
    cause = ' '.join(str(e).split())[:300] or type(e).__name__
    return Failure(f'the push {what} at {constants.ENDPOINT} failed ({type(e).__name__}: {cause}); {remedy}')


def publish_zoo(args) -> int:
    """--zoo: every selected checkpoint's repository folder, refused whole before anything is written; pushed with
    --push."""
    names = select_names(args.cards, args.only)
    folders = write_zoo(args.output, names, args.cards, args.namespace)
    print(f'{len(folders)} repository folder{"s" if len(folders) != 1 else ""} in {args.output}')
    if args.push:
        try:
            done = push_zoo(folders, args.namespace, args.private, args.token)
        except Exception as e:  # noqa: BLE001 (the Hub client raises HTTP, connection and validation errors alike)
            raise _push_failed(e, f'to {args.namespace}', 'the folders are written, and the same command pushes what '
                                                          'is still missing') from None
        counts = {k: list(done.values()).count(k) for k in ('created', 'updated', 'unchanged')}
        print(', '.join(f'{n} {k}' for k, n in counts.items()) + f' at {constants.ENDPOINT}')
    return 0


@command('timm-minimal-publish')
def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    _check_arguments(args)
    hf_logging.disable_progress_bar()  # save_pretrained's shard bar: the tool prints its own lines
    if args.zoo:
        return publish_zoo(args)
    out = Path(args.output) if args.output else args.run / 'hub'
    if args.push and written_from(out, args.run, args.checkpoint):  # a push that failed before: the folder stands
        print(f'{out} already holds this run\'s {args.checkpoint} weights: pushing it as it is')
    else:
        export_run(args.run, out, args.repo_id, args.checkpoint, args.card_copy, args.ship_weights, args.note,
                   args.tag)
        print(f'wrote {out}')
    if args.push:
        try:
            url = push_folder(out, args.repo_id, args.private, args.revision, args.token, args.commit_message)
        except Exception as e:  # noqa: BLE001 (the Hub client raises HTTP, connection and validation errors alike)
            raise _push_failed(e, f'of {out} to {args.repo_id}', 'the folder is written, and the same command tries the '
                                                                 'push again') from None
        print(f'pushed {args.repo_id}: {url}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
