#!/usr/bin/env python
"""Give the shipped model cards (model_cards/<architecture>.<tag>.md) the template's library, tags and Usage section,
leaving their numbers and every other line as they are; then write the README's "which model?" table and its table of
the zoo from them, and the package's weights index (timm_minimal/models/weights/SHA256SUMS) from the SHA-256 each card
records of the weights it measured.

    python scripts/refresh_cards.py            # rewrite what differs
    python scripts/refresh_cards.py --check    # exit 1 if a card or the README's table differs
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the package of this checkout

from timm_minimal.models.pretrained import HUB_ORG, WEIGHTS_INDEX  # noqa: E402
from timm_minimal.tools.hub.cards import readme_with_which_model, refreshed_card, weights_index  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--check', action='store_true', help='only compare, write nothing')
    args = parser.parse_args()
    stale = []
    for path in sorted((ROOT / 'model_cards').glob('vit_minimal_*.md')):
        name = path.name[:-len('.md')]
        text = path.read_text(encoding='utf-8')
        new = refreshed_card(text, f'{HUB_ORG}/{name}', name)
        if new != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding='utf-8')
    for path, make in ((ROOT / 'README.md', lambda text: readme_with_which_model(text, ROOT / 'model_cards')),
                       (WEIGHTS_INDEX, lambda text: weights_index(ROOT / 'model_cards'))):
        text = path.read_text(encoding='utf-8') if path.is_file() else ''
        new = make(text)
        if new != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding='utf-8')
    print(f'{len(stale)} file(s) {"differ" if args.check else "rewritten"}: {", ".join(stale) or "none"}')
    return 1 if args.check and stale else 0


if __name__ == '__main__':
    sys.exit(main())
