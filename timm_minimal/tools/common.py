"""What the tools share beyond the command-line layer (``timm_minimal.cli``): the model a tool is pointed at by name,
refused with the names allowed, the CPU a benchmark ran on, and the writing of a benchmark's JSON and markdown report."""
import json
import os
import shlex
from typing import Any, Dict, List, Optional, Sequence, Type

import timm
import torch.nn as nn

from ..machine import cpu_signature, usable_cores
from ..models.paper import VARIANTS
from ..models.pretrained import RECIPE_TAGS, TAGS, check_tag_spelling
from ..models.vit_minimal import ARCHITECTURES, NoPretrainedWeights, VisionTransformerMinimal


def allowed_models() -> str:
    """The model names a tool takes, for error messages."""
    return (f'a vit_minimal architecture vit_minimal_<{"|".join(VARIANTS)}>[_mlp]_<depth>x<heads> '
            f'({len(ARCHITECTURES)} registered: timm.list_models("vit_minimal*")) with an optional tag '
            f'{", ".join("." + t for t in TAGS)}; shipped weights: {", ".join(timm.list_pretrained("vit_minimal*"))}; '
            f'or local-dir:PATH / hf-hub:REPO')


def model_label(model: nn.Module) -> str:
    """The name a model goes by in titles and reports: ``local-dir:<folder>`` or ``hf-hub:<repo>`` for a checkpoint
    loaded from there (its config names the architecture and tag it was trained as, not these weights), else
    ``<architecture>.<tag>`` of a model built from the registry, else the architecture or the class."""
    cfg = getattr(model, 'pretrained_cfg', None) or {}
    source, arch, tag = cfg.get('source'), cfg.get('architecture'), cfg.get('tag')
    if source == 'local-dir' and cfg.get('file'):
        return f'local-dir:{cfg["file"]}'
    if source == 'hf-hub' and cfg.get('hf_hub_id'):
        return f'hf-hub:{cfg["hf_hub_id"]}'
    return f'{arch}.{tag}' if arch and tag else (arch or type(model).__name__)


def describe_load_error(name: str, e: BaseException) -> str:
    """One line for a model that could not be loaded; an invalid config.json of a ``local-dir:`` or ``hf-hub:``
    checkpoint is named by its path."""
    if isinstance(e, json.JSONDecodeError):
        where = f'{name[len("local-dir:"):]}/config.json' if name.startswith('local-dir:') else f'the config.json of {name}'
        return f'cannot load {name}: {where} is not valid JSON ({e})'
    return f'cannot load {name}: {" ".join(str(e).split())[:400]}'


def create_named_model(name: str, pretrained: bool, error: Type[Exception] = ValueError,
                       no_weights_hint: str = '') -> nn.Module:
    """The model ``name`` names, in eval mode: a ``vit_minimal_*`` architecture with an optional tag (its
    weights with ``pretrained``, else a random initialisation), or a ``local-dir:`` / ``hf-hub:`` checkpoint
    (always with its weights). Anything else raises ``error`` with what is allowed; a tag without weights adds
    ``no_weights_hint``."""
    checkpoint = name.startswith(('local-dir:', 'hf-hub:'))
    if not checkpoint:
        arch, _, tag = name.partition('.')
        if arch not in ARCHITECTURES:
            raise error(f"unknown model '{name}': expected {allowed_models()}")
        try:
            check_tag_spelling(tag)
        except ValueError as e:
            raise error(f"unknown model '{name}': {e}") from None
        if tag and tag not in TAGS:
            raise error(f"unknown model '{name}': the tags are {', '.join('.' + t for t in TAGS)}")
        with_tag = timm.list_pretrained(f'*.{tag}') if tag in RECIPE_TAGS else ()
        if tag in RECIPE_TAGS and name not in with_tag:  # a recipe tag exists only where its weights ship
            raise error(f"unknown model '{name}': .{tag} weights exist for {', '.join(with_tag)} only")
    try:
        model = timm.create_model(name, pretrained=pretrained or checkpoint)
    except NoPretrainedWeights as e:
        raise error(f'{e}{no_weights_hint}') from e
    except RuntimeError as e:
        raise error(f'cannot load {name}: {e}') from e
    except json.JSONDecodeError as e:
        raise error(describe_load_error(name, e)) from e
    except (OSError, ValueError, TypeError, KeyError) as e:  # TypeError: a config naming another architecture's args
        raise error(f'cannot load {name}: {e}') from e
    if not isinstance(model, VisionTransformerMinimal):
        raise error(f'{name} is a {type(model).__name__}, not a vit_minimal model; expected {allowed_models()}')
    return model.eval()


def write_report(results: Dict[str, Any], text: str, out_json: Optional[str], out_md: Optional[str]) -> None:
    """Write a benchmark's results (JSON) and report (markdown) where given (an empty path: not written),
    then print which files were written and the report."""
    for path, content in ((out_json, json.dumps(results, indent=1) + '\n'), (out_md, text)):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, 'w') as f:
                f.write(content)
    written = [p for p in (out_json, out_md) if p]
    print(('\nwrote ' + ', '.join(written) + '\n' if written else '\n') + '\n' + text, end='', flush=True)


def cpu_environment() -> Dict[str, str]:
    """This CPU for a benchmark report's header: ``device`` (model and the cores this process may use) and ``flags``
    (its SIMD flags), from the one reading of the CPU that the trainer's process split uses."""
    cpu = cpu_signature()
    return dict(device=f"{cpu['cpu']}, {usable_cores()} cores", flags=cpu['flags'])


def cpu_flags_lines(env: Dict[str, Any]) -> List[str]:
    """The report header's line naming the CPU's SIMD flags, where ``env`` has them (none for a GPU, or a report
    written before they were recorded)."""
    return [f"- CPU flags: {env['flags'] or 'none of avx, amx, fma, sse4'}"] if 'flags' in env else []


def portable_command(command: str, model: str) -> str:
    """The run's command with its output folder written as runs/<model> and its data folder as data
    (where they lay is no recipe). A command that does not split as a shell line (an open quote) is refused."""
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise ValueError(f'the run\'s command is not a shell line ({e}): {command[:120]!r}') from None
    for i, word in enumerate(words[:-1]):
        if word == '--output':
            words[i + 1] = f'runs/{model}'
        elif word == '--data-dir':
            words[i + 1] = 'data'
    return shlex.join(words)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Optional[str] = None) -> str:
    """A markdown table of ``rows`` under ``header``; ``align`` gives each column's alignment, one letter each,
    ``l`` or ``r`` (None: none marked)."""
    if align is None:
        rule = '|' + '|'.join('---' for _ in header) + '|'
    else:
        rule = '| ' + ' | '.join('---:' if a == 'r' else ':---' for a in align) + ' |'
    return '\n'.join(['| ' + ' | '.join(header) + ' |', rule] + ['| ' + ' | '.join(r) + ' |' for r in rows])
