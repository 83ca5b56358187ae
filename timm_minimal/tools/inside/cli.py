"""The command lines of ``timm-minimal-attention`` and ``timm-minimal-app``, which import neither torch, timm nor
gradio (``--help`` answers at once; ``timm_minimal_scripts``)."""
import argparse

from ...cli import OneLineParser, number

__all__ = ['ATTENTION_PROG', 'APP_PROG', 'DEFAULT_MODEL', 'build_parser', 'app_parser']

ATTENTION_PROG, APP_PROG = 'timm-minimal-attention', 'timm-minimal-app'
ATTENTION_DESCRIPTION = ('Attention maps of a minimal transformer for one image: every head of every layer as a heat '
                         'map over the image, the attention rollout across the layers, and each layer\'s raw score '
                         'matrix beside its attention.')
APP_DESCRIPTION = 'An attention explorer for the zoo in the browser: a gradio app over the shipped checkpoints.'
DEFAULT_MODEL = 'vit_minimal_sym_6x4.cifar10'


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=ATTENTION_PROG, description=ATTENTION_DESCRIPTION)
    p.add_argument('image', help='an image file (any size and mode PIL reads; resized to the model input)')
    p.add_argument('--model', default=DEFAULT_MODEL,
                   help='a vit_minimal_* name with its tag (default: %(default)s), local-dir:..., hf-hub:...')
    p.add_argument('--random-init', action='store_true',
                   help='draw the untrained model (for tags without weights); by default the trained weights are loaded')
    p.add_argument('--pretrained', action='store_true', help=argparse.SUPPRESS)  # the default now; kept for a release
    p.add_argument('--output', default='runs/attention.png',
                   help='the PNG to write (default: %(default)s, beside the training runs)')
    p.add_renamed('--out', '--output')  # the earlier spelling, for one release
    p.add_argument('--head', type=number(int, 1), default=1,
                   help='the head (1-based) whose score and attention matrices are shown (default: %(default)s)')
    p.add_argument('--dpi', type=number(int, 1, 1000), default=100, help='resolution of the PNG, 1 to 1000 (default: %(default)s)')
    return p


def app_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=APP_PROG, description=APP_DESCRIPTION)
    p.add_argument('--host', default='127.0.0.1', help='address to serve on')
    p.add_argument('--port', type=number(int, 1, 65535), default=7860, help='port to serve on')
    p.add_argument('--checkpoints', nargs='+', default=None,
                   help='checkpoints to offer (default: every shipped one)')
    return p
