"""What a model card of this package says about where and how the model is used: its library and tags (the Hub
shows the "Use this model" snippet of that library), the template every card is rendered from, and its Usage section,
which ``refreshed_card`` puts into a card written by an earlier template (``scripts/refresh_cards.py``)."""
from importlib import resources
from pathlib import Path
from typing import Optional

__all__ = ['CARD_LIBRARY', 'CARD_TAGS', 'card_template', 'card_usage', 'refreshed_card']

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
    from jinja2 import Template
    text = card_template()
    return Template(text[_section(text, '## Usage')], keep_trailing_newline=True).render(repo_id=repo_id, shipped=shipped)


def refreshed_card(text: str, repo_id: str, shipped: Optional[str]) -> str:
    """A card with the template's library, tags and Usage section; its numbers and every other line as they were."""
    from huggingface_hub import ModelCard
    card = ModelCard(text)
    attn = [t for t in card.data.tags or [] if t.startswith('attn-')]
    card.data.library_name, card.data.tags = CARD_LIBRARY, [*CARD_TAGS, *attn]
    text = str(card)
    where = _section(text, '## Usage')
    return text[:where.start] + card_usage(repo_id, shipped) + text[where.stop:]
