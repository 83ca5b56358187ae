"""The command line of ``timm-minimal-publish``, which imports neither torch nor timm (``--help`` answers
at once; ``timm_minimal_scripts``)."""
import argparse
from pathlib import Path

from ...cli import OneLineParser

__all__ = ['DESCRIPTION', 'RUN_OPTIONS', 'ZOO_OPTIONS', 'build_parser']

DESCRIPTION = ('Turn a finished training run into a Hugging Face Hub repository, and upload it; or, with --zoo, every '
               'checkpoint that ships with the package into its own repository.')
# The options that describe one run; --zoo publishes what ships, so it takes none of them.
RUN_OPTIONS = ('repo_id', 'checkpoint', 'card_copy', 'ship_weights', 'tag', 'note', 'revision', 'commit_message')
# The options of --zoo alone.
ZOO_OPTIONS = ('only', 'cards', 'namespace')


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog='timm-minimal-publish', description=DESCRIPTION)
    parser.add_argument('run', type=Path, nargs='?',
                        help='a finished training run folder (timm-minimal-train --output); not with --zoo')
    parser.add_argument('--repo-id', help='Hub repository of the run, e.g. my-org/vit_minimal_sym_6x4.mnist (required '
                        'with a run)')
    parser.add_argument('--output', type=Path, help='repository folder to write (default: <run>/hub); with --zoo the '
                        'folder that gets one repository folder per checkpoint (required)')
    zoo = parser.add_argument_group('the zoo', 'every checkpoint that ships with the package, each into its own '
                                    'repository <namespace>/<architecture>.<tag>, from its weights in the package and its '
                                    'card in --cards')
    zoo.add_argument('--zoo', action='store_true', help='publish the shipped checkpoints instead of a run')
    zoo.add_argument('--only', nargs='+', metavar='PATTERN',
                     help="only the checkpoints whose name matches one of these patterns (fnmatch: '*.mnist', "
                          "'vit_minimal_sym_*')")
    zoo.add_argument('--cards', type=Path, default=Path('model_cards'),
                     help="the model cards, <architecture>.<tag>.md (default: the checkout's model_cards)")
    zoo.add_argument('--namespace', default='timm-minimal',
                     help="the user or organisation the repositories are pushed to (the pretrained cfgs' hf_hub_id "
                          "name timm-minimal)")
    parser.add_renamed('--out', '--output')  # the earlier spelling, for one release
    parser.add_argument('--checkpoint', choices=('last', 'best'), default='last',
                        help="weights to publish: the last epoch's (default, as the paper reports) or the best")
    parser.add_argument('--card-copy', type=Path, help='also copy the model card here (e.g. model_cards/<name>.md)')
    parser.add_argument('--ship-weights', nargs='?', const=Path('timm_minimal/models/weights'), type=Path, metavar='DIR',
                        help='maintainers: also copy the weights into DIR (default timm_minimal/models/weights, of the '
                             'checkout in the current folder), where the package build picks them up')
    parser.add_argument('--tag', help="the tag the card names and the weights ship under (default: the run's own): "
                        "a recipe tag of the run's dataset, e.g. mixup_cifar10")
    parser.add_argument('--note', default='', help='a sentence on how the run was made, for the card '
                        '(e.g. that it shared its GPU with other runs)')
    parser.add_argument('--push', action='store_true', help='upload the folder to the Hub (HF_ENDPOINT, HF_TOKEN)')
    parser.add_argument('--private', action='store_true', help='create the repository private')
    parser.add_argument('--revision', help='branch to upload to (created if missing; default main)')
    parser.add_argument('--token', help='Hub token (default: HF_TOKEN or the saved login)')
    parser.add_argument('--commit-message', help='message of the upload commit (default: huggingface_hub\'s)')
    return parser
