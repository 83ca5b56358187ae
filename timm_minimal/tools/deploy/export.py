"""Export a model for deployment: ONNX with a dynamic batch dimension, its preprocessing, an int8 copy.

    timm-minimal-export --model vit_minimal_sym_6x4.mnist --output export/sym-mnist
    timm-minimal-export --model vit_minimal_sym_6x4.cifar10 --output export/sym-cifar10 --int8 --verify-data-dir data

The model is a ``vit_minimal_*`` architecture with an optional tag (its shipped weights), or a
``local-dir:`` / ``hf-hub:`` checkpoint. ``--output`` receives ``model.onnx`` (fp32; input
``pixel_values`` (batch, C, H, W), normalised; output ``logits`` (batch, classes)), with ``--int8``
``model.int8.onnx`` (weights quantised to int8, activations quantised on the fly: onnxruntime's
``quantize_dynamic``) and ``preprocessing.json`` (input size, channels, resize and crop, mean and
std, label names: timm's pretrained cfg of the model). The graph comes from ``torch.onnx.export``
with the dynamo exporter; nothing is rewritten by hand.

Every file is checked with onnxruntime before the folder appears: the fp32 logits must equal torch's
within ``--atol`` (1e-4) on batches of another size than the exported one, and with
``--verify-data-dir`` the top-1 accuracy of torch, fp32 and int8 over the whole test split is
measured (int8 at most ``--max-int8-drop`` points below fp32). Files are written into a temporary
folder beside ``--output`` and renamed into place, so a failure leaves nothing half-written. ``--overwrite``
replaces only an earlier export (recognised by its ``.timm-minimal-export.json``) or an empty folder: never a
folder with other files, the working folder or one of its ancestors.

Needs the ``export`` extra: ``pip install -e ".[export]"`` (onnx, onnxscript, onnxruntime).
"""
import argparse
import json
import logging
import math
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from timm.data import create_transform, resolve_data_config
from torch.onnx._constants import ONNX_MAX_OPSET
from torchvision import transforms

from ...models.images import image_mode
from ..common import create_named_model, model_label
from ...cli import Failure, UsageError, command, number, require_extra
from .cli import MIN_OPSET, build_parser
from ..cli import EVAL_BATCH_SIZE
from ..staging import staged_folder
from ...models.configuration_vit_minimal import VitMinimalConfig
from ..evaluate import evaluate_split, load_eval_split, model_label_names, tag_dataset
from ...models.vit_minimal import VisionTransformerMinimal

__all__ = ['ExportResult', 'ExportError', 'VerificationError', 'EXPORT_PACKAGES',
           'require_export_extra', 'resolve_model', 'preprocessing_config', 'export_onnx',
           'quantize_int8', 'staged_folder', 'ort_session', 'ort_forward', 'max_abs_diff', 'export_model',
           'format_report', 'main']

EXPORT_PACKAGES = ('onnx', 'onnxscript', 'onnxruntime')
INPUT_NAME, OUTPUT_NAME = 'pixel_values', 'logits'
FP32_FILE, INT8_FILE, PREPROCESSING_FILE = 'model.onnx', 'model.int8.onnx', 'preprocessing.json'
# the ops whose weights dynamic quantisation stores as int8: the attention and MLP maps and the classifier;
# the patch embedding (a Conv on the raw pixels) stays fp32
INT8_OP_TYPES = ('MatMul', 'Gemm')
EXPORT_BATCH = 2  # the example batch; 1 would be specialised by torch.export, verification uses 1 and 5


class ExportError(UsageError):
    """A model, option or output folder that cannot be exported, with what is allowed."""


class VerificationError(Failure):
    """An exported file that does not compute what the torch model computes (nothing is written)."""

    def __init__(self, message: str) -> None:
        super().__init__(f'verification failed, nothing written: {message}')


@dataclass
class ExportResult:
    """What ``export_model`` wrote and measured."""
    model: str
    out_dir: Path
    files: Dict[str, int]  # file name -> size in bytes
    max_abs_diff: float  # fp32 ONNX logits against torch eager
    int8_max_abs_diff: Optional[float] = None  # int8 ONNX logits against torch eager (not bounded)
    accuracy: Optional[Dict[str, Dict[str, Any]]] = None  # 'torch', 'fp32', 'int8' -> evaluate_split metrics
    preprocessing: Dict[str, Any] = field(default_factory=dict)


def require_export_extra() -> None:
    """Import onnx, onnxscript and onnxruntime, or fail with what to install (``MissingExtra``)."""
    require_extra(EXPORT_PACKAGES, 'export', 'ONNX export')


# -- the model and its preprocessing ---------------------------------------------------------------

def resolve_model(name: str, pretrained: bool = True) -> nn.Module:
    """The model ``name`` names, in eval mode (see ``common.create_named_model``)."""
    return create_named_model(name, pretrained, ExportError, ' (--random-init exports the untrained model)')


def _label_names(model: nn.Module) -> List[str]:
    """The class names the Hugging Face config of the model gives (its ``id2label``): one source for both."""
    id2label = VitMinimalConfig.from_timm(model).id2label
    return [str(id2label[i]) for i in sorted(id2label)]


def _check_geometry(model: nn.Module, input_size: Tuple[int, ...]) -> None:
    """The preprocessing must describe the model: its pretrained cfg's input size is the one it takes."""
    actual = (model.in_chans, *model.patch_embed.img_size)
    if input_size[0] != actual[0] or (input_size[1:] != actual[1:] and not model.dynamic_img_size):
        raise ExportError(f"the model takes {'x'.join(map(str, actual))} inputs but its pretrained cfg says "
                          f"{'x'.join(map(str, input_size))}: give the model a matching pretrained cfg "
                          f"(pretrained_cfg_overlay=dict(input_size=..., mean=..., std=...))")


def preprocessing_config(model: nn.Module, name: Optional[str] = None) -> Dict[str, Any]:
    """What the exported graph expects: timm's evaluation preprocessing of the model (``resolve_data_config``
    and the transform ``create_transform`` builds from it), the input and output tensors and the class names."""
    cfg = resolve_data_config({}, model=model)
    _check_geometry(model, tuple(cfg['input_size']))
    tf = create_transform(**cfg)
    resize = next(t for t in tf.transforms if isinstance(t, transforms.Resize))
    crop = next(t for t in tf.transforms if isinstance(t, transforms.CenterCrop))
    channels, height, width = cfg['input_size']
    return dict(
        model=name or model_label(model),
        input=dict(name=INPUT_NAME, shape=['batch', channels, height, width], dtype='float32', layout='NCHW'),
        output=dict(name=OUTPUT_NAME, shape=['batch', model.num_classes], dtype='float32', meaning='logits'),
        input_size=list(cfg['input_size']), channels=channels, color_mode=image_mode(channels),
        resize=resize.size if isinstance(resize.size, int) else list(resize.size), interpolation=cfg['interpolation'],
        crop_pct=cfg['crop_pct'], crop_mode=cfg['crop_mode'], center_crop=list(crop.size),
        pixel_scale=1 / 255, mean=list(cfg['mean']), std=list(cfg['std']),
        steps=[f'convert the image to {image_mode(channels)} (PIL mode)',
               f'resize (shorter side to {resize.size}, {cfg["interpolation"]})', f'center crop {height}x{width}',
               'scale pixels to [0, 1]', '(x - mean) / std per channel', 'stack as float32 NCHW'],
        label_names=_label_names(model),
    )


# -- writing ------------------------------------------------------------------------------------------

def export_onnx(model: nn.Module, path: Path, opset: Optional[int] = None) -> None:
    """``model`` as an fp32 ONNX file with a dynamic batch dimension (torch's dynamo exporter), without the
    exporter's per-node debugging metadata (source paths and stack traces; onnx_ir's metadata pass)."""
    from onnx_ir.passes.common import ClearMetadataAndDocStringPass  # lazy: the export extra
    example = torch.randn(EXPORT_BATCH, *model.pretrained_cfg['input_size'])
    with warnings.catch_warnings():  # torch 2.13's exporter warns about its own use of pytree's LeafSpec
        warnings.filterwarnings('ignore', message=r'`isinstance\(treespec, LeafSpec\)` is deprecated',
                                category=FutureWarning)
        program = torch.onnx.export(
            model, (example,), dynamo=True, verbose=False, opset_version=opset, input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME], dynamic_shapes=({0: torch.export.Dim('batch')},), external_data=False)
    ClearMetadataAndDocStringPass()(program.model)
    program.save(str(path), external_data=False)


def quantize_int8(src: Path, dst: Path) -> None:
    """The dynamically quantised copy of an fp32 ONNX file: onnxruntime's shape inference and graph
    optimisation (``quant_pre_process``, advised before quantising), then ``quantize_dynamic`` with int8
    weights for the ``INT8_OP_TYPES``."""
    from onnxruntime.quantization import QuantType, quant_pre_process, quantize_dynamic  # lazy: the export extra
    with tempfile.TemporaryDirectory() as scratch:
        prepared = Path(scratch) / 'prepared.onnx'
        quant_pre_process(str(src), str(prepared))
        quantize_dynamic(str(prepared), str(dst), op_types_to_quantize=list(INT8_OP_TYPES),
                         weight_type=QuantType.QInt8)


def ort_session(path: Path, threads: Optional[int] = None) -> Any:
    """An onnxruntime CPU session of an ONNX file (``threads``: intra-op threads, default all cores)."""
    import onnxruntime as ort  # lazy: the export extra
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])


def ort_forward(session: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function from a batch of normalised images to logits that runs an onnxruntime session."""
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run([OUTPUT_NAME], {INPUT_NAME: x.detach().cpu().numpy()})[0])
    return forward


# -- verification -------------------------------------------------------------------------------------

VERIFY_BATCHES = (1, 5)  # batch sizes other than the exported one: the batch dimension is dynamic


@torch.no_grad()
def max_abs_diff(model: nn.Module, forward: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """The largest |logit difference| between ``forward`` and the torch model over seeded random batches."""
    generator = torch.Generator().manual_seed(0)
    worst = 0.0
    for batch in VERIFY_BATCHES:
        x = torch.randn(batch, *model.pretrained_cfg['input_size'], generator=generator)
        ref, out = model(x), forward(x)
        if out.shape != ref.shape:
            raise VerificationError(f'the ONNX model gave logits of shape {list(out.shape)} for a batch of {batch}; '
                                    f'torch gives {list(ref.shape)}')
        worst = max(worst, float((out - ref).abs().max()))
    return worst


def _check_accuracy(accuracy: Dict[str, Dict[str, Any]], max_int8_drop: float) -> None:
    if 'int8' in accuracy:
        drop = accuracy['fp32']['acc'] - accuracy['int8']['acc']
        if not drop <= max_int8_drop:
            raise VerificationError(f"int8 top-1 {accuracy['int8']['acc']:.2f}% is {drop:.2f} points below fp32 "
                                    f"{accuracy['fp32']['acc']:.2f}% (allowed: {max_int8_drop:g}, --max-int8-drop)")


def _versions() -> Dict[str, str]:
    import onnx  # lazy: the export extra
    import onnxruntime  # lazy: the export extra
    import onnxscript  # lazy: the export extra
    return dict(torch=torch.__version__, onnx=onnx.__version__, onnxscript=onnxscript.__version__,
                onnxruntime=onnxruntime.__version__)


def _write_and_verify(model: nn.Module, stage: Path, int8: bool, preprocessing: Dict[str, Any], atol: float,
                      opset: Optional[int], evaluate: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]],
                      max_int8_drop: float) -> ExportResult:
    """Write the files into ``stage`` and check them with onnxruntime (``evaluate``: the test-split accuracy)."""
    export_onnx(model, stage / FP32_FILE, opset)
    sessions = {'fp32': ort_session(stage / FP32_FILE)}
    if int8:
        quantize_int8(stage / FP32_FILE, stage / INT8_FILE)
        sessions['int8'] = ort_session(stage / INT8_FILE)
    diffs = {key: max_abs_diff(model, ort_forward(session)) for key, session in sessions.items()}
    if not diffs['fp32'] <= atol:
        raise VerificationError(f"the ONNX logits differ from torch's by up to {diffs['fp32']:.2e} (allowed: {atol:g})")
    accuracy = evaluate(sessions) if evaluate is not None else None
    if accuracy is not None:
        _check_accuracy(accuracy, max_int8_drop)
    files = {'fp32': FP32_FILE, **({'int8': INT8_FILE} if int8 else {})}
    verification = dict(max_abs_logit_diff=diffs, atol=atol, batch_sizes=list(VERIFY_BATCHES),
                        **({'accuracy': accuracy} if accuracy is not None else {}))
    config = dict(preprocessing, files=files, verification=verification, versions=_versions())
    (stage / PREPROCESSING_FILE).write_text(json.dumps(config, indent=2) + '\n')
    sizes = {name: (stage / name).stat().st_size for name in [*files.values(), PREPROCESSING_FILE]}
    return ExportResult(preprocessing['model'], stage, sizes, diffs['fp32'], diffs.get('int8'), accuracy,
                        preprocessing)


def export_model(model: Union[str, nn.Module], out_dir: Union[str, Path], int8: bool = False, *,
                 pretrained: bool = True, verify_data_dir: Optional[str] = None, dataset: Optional[str] = None,
                 atol: float = 1e-4, max_int8_drop: float = 0.5, opset: Optional[int] = None,
                 overwrite: bool = False, batch_size: int = EVAL_BATCH_SIZE) -> ExportResult:
    """Export ``model`` (a name for ``resolve_model`` or a vit_minimal model) to ONNX in ``out_dir``, with
    ``int8`` also its dynamically quantised copy, and its preprocessing; verified with onnxruntime (see the
    module's description). Raises ``ExportError``, ``VerificationError`` or ``cli.MissingExtra``;
    ``out_dir`` then stays as it was."""
    require_export_extra()
    for key, value in (('atol', atol), ('max_int8_drop', max_int8_drop)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ExportError(f'{key} must be a finite number of at least 0, got {value!r}')
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ExportError(f'batch_size must be an integer of at least 1, got {batch_size!r}')
    if opset is not None:  # the newest opset is the installed torch's, which the command line's parser does not import
        try:
            number(int, MIN_OPSET, _max_opset())(str(opset))
        except argparse.ArgumentTypeError as e:
            raise ExportError(f'opset: {e}') from None
    if isinstance(model, str):
        name, model = model, resolve_model(model, pretrained)
    else:
        if not isinstance(model, VisionTransformerMinimal):
            raise ExportError(f'export_model takes a VisionTransformerMinimal, got {type(model).__name__}')
        name, model = model_label(model), model.eval()
    evaluate = None
    if verify_data_dir is not None:
        evaluate = _test_split_evaluator(model, dataset, verify_data_dir, batch_size)
    preprocessing = preprocessing_config(model, name)
    with staged_folder(Path(out_dir), overwrite, record=True, error=ExportError) as stage:
        result = _write_and_verify(model, stage, int8, preprocessing, atol, opset, evaluate, max_int8_drop)
    result.out_dir = Path(out_dir)
    return result


def _test_split_evaluator(model: nn.Module, dataset: Optional[str], data_dir: str,
                          batch_size: int) -> Callable[[Dict[str, Any]], Dict[str, Dict[str, Any]]]:
    """A function from onnxruntime sessions to the test-split metrics of torch and of each session. The split is
    read and matched to the model's classes here, before anything is exported: missing data are named at once."""
    dataset = dataset or tag_dataset(model)
    if dataset is None:
        raise ExportError('the model has no dataset tag: name the test data with --dataset')
    cfg = resolve_data_config({}, model=model)
    data = load_eval_split(cfg, model.num_classes, dataset, data_dir, label_names=model_label_names(model),
                           data_option='--verify-data-dir')

    def evaluate(sessions: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
        forwards = {'torch': model, **{key: ort_forward(s) for key, s in sessions.items()}}
        return evaluate_split(forwards, data, cfg, model.num_classes, batch_size)
    return evaluate


# -- command line -------------------------------------------------------------------------------------

def _size(n: int) -> str:
    return f'{n / 1e6:.2f} MB' if n >= 1e6 else f'{n / 1e3:.1f} kB'


def format_report(result: ExportResult) -> str:
    """A table of the files written: size, the largest logit difference to torch, test-split top-1."""
    acc = result.accuracy or {}
    first = next(iter(acc.values()), None)
    acc_head = f"top-1 {first['dataset']} {first['split']} ({first['samples']:,})" if first else ''
    rows = [('file', 'size', 'max |logit - torch|', acc_head)]
    kinds = {FP32_FILE: ('fp32', result.max_abs_diff), INT8_FILE: ('int8', result.int8_max_abs_diff)}
    for name, size in result.files.items():
        kind, diff = kinds.get(name, (None, None))
        rows.append((name, _size(size), f'{diff:.1e}' if diff is not None else '',
                     f"{acc[kind]['acc']:.2f}%" if kind in acc else ''))
    if 'torch' in acc:
        rows.append(('torch (eager)', '', '', f"{acc['torch']['acc']:.2f}%"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ['  '.join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    return f'{result.model} -> {result.out_dir}\n' + '\n'.join(lines)


def _max_opset() -> int:
    return ONNX_MAX_OPSET


@command('timm-minimal-export')
def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line; returns the exit status (0 written, 1 verification or a write failed, 2 bad input);
    argparse exits with 2 for a bad command line."""
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and a bad command line exit here, as in every tool
    require_export_extra()
    logging.getLogger('onnx_ir').setLevel(logging.ERROR)  # the exporter's notes on attribute types
    result = export_model(args.model, args.output, args.int8, pretrained=not args.random_init,
                          verify_data_dir=args.verify_data_dir, dataset=args.dataset, atol=args.atol,
                          max_int8_drop=args.max_int8_drop, opset=args.opset, overwrite=args.overwrite,
                          batch_size=args.batch_size)
    print(format_report(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
