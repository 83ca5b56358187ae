"""The command line of ``timm-minimal-export``, which imports neither torch nor onnx (``--help`` answers at once;
``timm_minimal_scripts``)."""
import argparse

from ...cli import OneLineParser, non_negative_float, number, positive_int
from ..cli import EVAL_BATCH_SIZE

__all__ = ['DESCRIPTION', 'MIN_OPSET', 'build_parser']

DESCRIPTION = 'Export a model for deployment: ONNX with a dynamic batch dimension, its preprocessing, an int8 copy.'
MIN_OPSET = 18  # the lowest opset torch's dynamo exporter writes


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog='timm-minimal-export', description=DESCRIPTION)
    p.add_required('--model', help='vit_minimal_<attention>[_mlp]_<depth>x<heads>[.tag], local-dir:PATH or hf-hub:REPO')
    p.add_required('--output', help='the folder to write (created; see --overwrite)')
    p.add_renamed('model', '--model')  # the earlier spellings: the model as the first word, --out
    p.add_renamed('--out', '--output')
    p.add_argument('--int8', action='store_true', help='also write model.int8.onnx, dynamically quantised')
    p.add_argument('--verify-data-dir', default=None,
                   help='measure top-1 of torch, fp32 and int8 over the test split of the data here')
    p.add_argument('--dataset', default=None, help="the test data for --verify-data-dir (default: the tag's)")
    p.add_argument('--max-int8-drop', type=non_negative_float, default=0.5, help='allowed int8 top-1 loss against fp32, in points (default: %(default)s)')
    p.add_argument('--atol', type=non_negative_float, default=1e-4, help='allowed |fp32 ONNX logit - torch logit| (default: %(default)s)')
    p.add_argument('--random-init', action='store_true', help='export the untrained model (for tags without weights)')
    p.add_argument('--opset', type=number(int, MIN_OPSET), default=None,
                   help=f"ONNX opset, from {MIN_OPSET} to the newest the installed torch writes (default: the exporter's)")
    p.add_argument('--batch-size', type=positive_int, default=EVAL_BATCH_SIZE,
                   help='batch size of the test-split evaluation (default: %(default)s, as timm-minimal-evaluate)')
    p.add_argument('--overwrite', action='store_true', help='replace an earlier export in --output (never other files)')
    return p
