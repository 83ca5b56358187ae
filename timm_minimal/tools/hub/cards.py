"""What a model card of this package says about where and how the model is used: its library and tags (the Hub
shows the "Use this model" snippet of that library), the template every card is rendered from, and its Usage section,
which ``refreshed_card`` puts into a card written by an earlier template (``scripts/refresh_cards.py``); and the SHA-256
of the weights each card measured, which the package's weights index repeats (``weights_index``)."""
import re
from importlib import resources
from pathlib import Path
from typing import Optional

from huggingface_hub import ModelCard

from ...models.datasets import DATASETS
from ...models.paper import FLAGSHIP, TABLE1, TABLE2
from ...models.pretrained import tag_dataset
from ...models.vit_minimal import ARCHITECTURES

__all__ = ['CARD_LIBRARY', 'CARD_TAGS', 'card_template', 'card_usage', 'refreshed_card', 'which_model',
           'readme_with_which_model', 'card_weights_sha256', 'weights_index']

# The card's library and tags decide the snippet of the Hub's "Use this model" button (zoo.hub_snippets): transformers
# with custom_code is the one that runs where only torch, timm and transformers are installed (timm's needs this package).
CARD_LIBRARY = 'transformers'
CARD_TAGS = ('image-classification', 'timm', 'custom_code', 'vit_minimal')


def card_template(template: Optional[Path] = None) -> str:
    """model_cards/template.md, shipped in the package as model_card_template.md (a link to it), or ``template``."""
    template = Path(template) if template else resources.files(__package__).joinpath('model_card_template.md')
    return template.read_text(encoding='utf-8')


def _section(text: str, heading: str) -> slice:
    """Where the section ``heading`` of a markdown text is: its heading up to the next ``## `` heading."""
    start = text.index(f'{heading}\n')
    return slice(start, text.index('\n## ', start + 1) + 1)


def card_usage(repo_id: str, shipped: Optional[str]) -> str:
    """The template's Usage section for a repository, with the offline lines of a ``shipped`` checkpoint."""
    from jinja2 import Template  # lazy: jinja2 only where a card is rendered
    text = card_template()
    return Template(text[_section(text, '## Usage')], keep_trailing_newline=True).render(repo_id=repo_id, shipped=shipped)


def refreshed_card(text: str, repo_id: str, shipped: Optional[str]) -> str:
    """A card with the template's library, tags and Usage section; its numbers and every other line as they were."""
    card = ModelCard(text)
    attn = [t for t in card.data.tags or [] if t.startswith('attn-')]
    card.data.library_name, card.data.tags = CARD_LIBRARY, [*CARD_TAGS, *attn]
    text = str(card)
    where = _section(text, '## Usage')
    return text[:where.start] + card_usage(repo_id, shipped) + text[where.stop:]


# -- the weights each card measured ----------------------------------------------------------------------------------

# how the template's Results section records the weights (model_cards/template.md: "... checkpoint: `model.safetensors`,
# SHA-256 `<hex>`.")
_WEIGHTS_SHA256 = re.compile(r'`model\.safetensors`, SHA-256 `([0-9a-f]{64})`')


def card_weights_sha256(text: str, where: str) -> str:
    """The SHA-256 of the weights a card measured; a card that records none, or more than one, is refused."""
    found = _WEIGHTS_SHA256.findall(text)
    if len(found) != 1:
        raise ValueError(f'{where} records {"no" if not found else "more than one"} SHA-256 of the weights it '
                         f'measured (a line "`model.safetensors`, SHA-256 `<64 hex digits>`", as the template writes '
                         f'it)')
    return found[0]


def weights_index(cards_dir: Path) -> str:
    """The text of the package's weights index (``models.pretrained.WEIGHTS_INDEX``) that the cards give: a line
    ``<sha256>  <architecture>.<tag>.safetensors`` per card, as ``sha256sum`` writes it."""
    lines = [f'{card_weights_sha256(p.read_text(encoding="utf-8"), str(p))}  {p.name[:-len(".md")]}.safetensors'
             for p in sorted(Path(cards_dir).glob('vit_minimal_*.md'))]
    return '\n'.join(lines) + '\n'


# -- the README's "which model?" table, from the cards --------------------------------------------------------------

WITHIN_POINTS = 1.0  # the smallest checkpoint whose accuracy is this close to the most accurate one's


def _card_facts(path: Path) -> dict:
    """A shipped card's name, dataset, test accuracy (its eval result), parameter count (its architecture table), and
    the epochs and device of its training (its training paragraph: "N epochs on one GPU (NAME)" or "on one CPU")."""
    card = ModelCard.load(path)
    result = card.data.eval_results[0]
    params = re.search(r'^\| parameters \| ([\d,]+) \|$', card.text, re.M)
    training = re.search(r' training images, (\d+) epochs on one (?:GPU \((?:NVIDIA )?(\S+)[^)]*\)|CPU)', card.text)
    if params is None or training is None:
        raise ValueError(f'{path} gives no parameter count ("| parameters | N |") or no training paragraph '
                         f'("N training images, E epochs on one GPU (NAME)" or "... on one CPU")')
    return dict(name=path.name[:-len('.md')], dataset=result.dataset_name, acc=float(result.metric_value),
                params=int(params.group(1).replace(',', '')), epochs=int(training.group(1)),
                device=training.group(2) or 'CPU')


def _cell(fact: dict, link_base: str) -> str:
    return (f'[`{fact["name"]}`]({link_base}/{fact["name"]}.md): {fact["acc"]:.2f}%, '
            f'{fact["params"]:,} parameters')


def which_model(cards_dir: Path, link_base: str = 'model_cards') -> str:
    """Markdown: per dataset, the most accurate shipped checkpoint, the smallest one within ``WITHIN_POINTS`` of it and
    the paper's flagship (its most accurate tag), all read from the cards; then the architectures without weights."""
    facts = [_card_facts(p) for p in sorted(Path(cards_dir).glob('vit_minimal_*.md'))]
    lines = [f'| data | the most accurate | the smallest within {WITHIN_POINTS:g} point of it | the paper\'s flagship '
             f'(`{FLAGSHIP}`: no MLP, symmetric attention) |', '|---|---|---|---|']
    order = [d.display_name for d in DATASETS.values()]
    for dataset in sorted(dict.fromkeys(f['dataset'] for f in facts), key=order.index):
        mine = [f for f in facts if f['dataset'] == dataset]
        best = max(mine, key=lambda f: f['acc'])
        small = min((f for f in mine if f['acc'] >= best['acc'] - WITHIN_POINTS), key=lambda f: (f['params'], -f['acc']))
        flagship = max((f for f in mine if f['name'].split('.')[0] == FLAGSHIP), key=lambda f: f['acc'])
        small_cell = 'the same: no smaller one is that close' if small is best else _cell(small, link_base)
        lines.append(f'| {dataset} | {_cell(best, link_base)} | {small_cell} | {_cell(flagship, link_base)} |')
    shipped = {f['name'].split('.')[0] for f in facts}
    without = [a for a in ARCHITECTURES if a not in shipped]
    in_tables = [a for a in without if any(row.arch == a for row in TABLE1 + TABLE2)]
    if in_tables:
        raise ValueError(f'{", ".join(in_tables)} ship without weights though the paper reports them')
    return '\n'.join(lines) + (
        f'\n\n{len(without)} of the {len(ARCHITECTURES)} architectures ship without weights: the paper reports no result '
        f'for any of them, and the zoo trains the models of its Tables 1 and 2. Table 2, the matrix variants, has 6 '
        f'layers only and no symmetric model with an MLP, and the Cholesky variant `chol` is named in the paper\'s text alone: '
        f'{", ".join(f"`{a}`" for a in without)}.\n')


WHICH_MODEL_MARKERS = ('<!-- which-model: start -->\n', '<!-- which-model: end -->\n')


ZOO_TABLE_MARKERS = ('<!-- zoo-table: start -->\n', '<!-- zoo-table: end -->\n')


def zoo_table(cards_dir: Path, link_base: str = 'model_cards') -> str:
    """Markdown: every shipped checkpoint with its data, parameters, epochs, device and test accuracy, read from its
    card, and the paper's validation accuracy for the architecture on that dataset (its Tables 1 and 2)."""
    paper = {}
    for row in TABLE1 + TABLE2:
        if row.val_acc is not None:
            paper.setdefault((row.arch, row.dataset), row.val_acc)
    lines = ['| checkpoint (model card) | data | parameters | epochs | trained on | test acc % | paper val acc % '
             '(500 epochs) |', '|---|---|---:|---:|---|---:|---:|']
    for fact in (_card_facts(p) for p in sorted(Path(cards_dir).glob('vit_minimal_*.md'))):
        arch, tag = fact['name'].split('.', 1)
        val = paper.get((arch, tag_dataset(tag)))
        lines.append(f'| [`{fact["name"]}`]({link_base}/{fact["name"]}.md) | {fact["dataset"]} | {fact["params"]:,} | '
                     f'{fact["epochs"]} | {fact["device"]} | {fact["acc"]:.2f} | '
                     f'{"-" if val is None else f"{val:.2f}"} |')
    return '\n'.join(lines) + '\n'


def readme_with_which_model(readme: str, cards_dir: Path) -> str:
    """The README's text with ``which_model`` and ``zoo_table`` between their markers."""
    for (start, end), table in ((WHICH_MODEL_MARKERS, which_model), (ZOO_TABLE_MARKERS, zoo_table)):
        a, b = readme.index(start) + len(start), readme.index(end)
        readme = readme[:a] + table(cards_dir) + readme[b:]
    return readme
