"""An attention explorer for the zoo in the browser: a gradio app over the shipped checkpoints.

    timm-minimal-app                       # http://127.0.0.1:7860
    timm-minimal-app --port 8000 --checkpoints vit_minimal_sym_6x4.mnist vit_minimal_std_mlp_6x1.mnist

Pick a shipped checkpoint (MNIST or CIFAR-10), then draw a digit, upload an image or pick one of the test
images that ship with the package. The page shows the top-5 classes and the maps of ``timm-minimal-attention``
as one mosaic (``mosaic.py``, drawn without matplotlib so that an answer is quick): the attention of every head of
every layer over the image, the attention rollout, and each layer's raw scores S beside A = softmax(S) (S is
symmetric for ``sym`` and ``chol``). Click a patch of any image in the mosaic to see where that patch looks, in
every layer and head (``/look`` in the API). The compare tab puts two checkpoints side by side on one input:
parameters, prediction and where each one looks.

The app is a view: every number comes from ``timm_minimal.tools.inside.attention.compute_attention`` (the model's
own ``get_attention_maps``). It serves on 127.0.0.1 and never asks for a public share link; the shipped weights
load without a network. Bad input (not an image, too large, an empty sketch) gets a message in the page and
the server keeps serving. Needs the ``app`` extra: ``pip install -e ".[app]"``.
"""
import contextlib
import functools
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import timm
from PIL import Image

from ...examples import example_images
from ...models.images import MAX_IMAGE_PIXELS, ImageTooLarge, check_image_size
from .attention import AttentionInputError, AttentionMaps, compute_attention, load_image
from .mosaic import Mosaic, draw_mosaic
from ..common import create_named_model
from ...cli import command, require_extra
from .cli import APP_PROG as PROG, app_parser

__all__ = ['AppInputError', 'Answer', 'shipped_checkpoints', 'example_images', 'sketch_to_image', 'answer',
           'compare', 'explore', 'look', 'build_app', 'main']

MAX_UPLOAD = '20mb'  # gradio refuses a larger file before it reaches the app (the images are bounded by pixels too)
TOP_K = 5
DEFAULT_PAIR = ('vit_minimal_std_mlp_6x1.mnist', 'vit_minimal_sym_6x4.mnist')  # the paper's baseline, symmetric
DEFAULT_CHECKPOINT = 'vit_minimal_sym_6x4.mnist'  # the README's screenshot


class AppInputError(ValueError):
    """An input the app cannot analyse; the message is shown in the page."""


def require_gradio() -> Any:
    """gradio, or ``MissingExtra`` naming the app extra."""
    require_extra(('gradio',), 'app', PROG)
    import gradio  # lazy: the app extra
    return gradio


def shipped_checkpoints() -> List[str]:
    """Every checkpoint that ships with the package, MNIST ones first."""
    names = timm.list_pretrained('vit_minimal*')
    return sorted(names, key=lambda n: (not n.endswith('.mnist'), n))


@functools.lru_cache(maxsize=16)
def load_checkpoint(name: str) -> Any:
    """A shipped (or local-dir:/hf-hub:) checkpoint in eval mode, built once per process."""
    return create_named_model(name, pretrained=True, error=AppInputError)


def sketch_to_image(value: Any) -> Image.Image:
    """The drawing of a sketchpad as a grey image, white ink on black as MNIST digits are (ink = opacity)."""
    composite = value.get('composite') if isinstance(value, dict) else value
    if composite is None:
        raise AppInputError('the sketch is empty: draw a digit first')
    if isinstance(composite, (str, Path)):
        composite = load_image(composite)
    elif not isinstance(composite, Image.Image):
        composite = np.asarray(composite)
        if composite.ndim < 2:
            raise AppInputError('the sketch is not an image')
        check_image_size(composite.shape[1], composite.shape[0], 'the sketch')
        composite = Image.fromarray(composite)
    check_image_size(*composite.size, what='the sketch')
    rgba = np.asarray(composite.convert('RGBA'), dtype=np.float32)
    if (rgba[..., 3] < 255).any():  # a transparent canvas: the strokes are its opaque part
        ink = rgba[..., 3]
    else:  # an opaque drawing: dark strokes on a light canvas are inverted
        grey = rgba[..., :3].mean(axis=-1)
        ink = 255 - grey if grey.mean() > 127 else grey
    if ink.max() < 8:
        raise AppInputError('the sketch is empty: draw a digit first')
    return Image.fromarray(ink.clip(0, 255).astype(np.uint8), 'L')


def open_upload(path: Optional[str]) -> Image.Image:
    """An uploaded file as an image, refused with a message when it is none or too large."""
    if not path:
        raise AppInputError('no image: upload one, or pick an example below')
    try:
        return load_image(path)
    except AttentionInputError as e:
        raise AppInputError(str(e).replace(str(path), Path(path).name)) from e


def parameters(name: str) -> int:
    """The parameter count of a checkpoint."""
    return sum(p.numel() for p in load_checkpoint(name).parameters())


@dataclass
class Answer:
    """One checkpoint on one image: its maps (kept for clicks), the mosaic drawn, the top classes and a summary."""
    maps: AttentionMaps
    mosaic: Mosaic
    top: Dict[str, float]
    text: str


def answer(name: str, image: Image.Image, patch: Optional[Tuple[int, int]] = None) -> Answer:
    """``name`` on ``image``: the maps, and the mosaic of what each patch receives, or with ``patch`` (row, column,
    0-based) where that patch looks."""
    maps = compute_attention(load_checkpoint(name), image)
    probs, index = maps.probabilities.topk(min(TOP_K, len(maps.probabilities)))
    top = {maps.labels[i]: float(p) for p, i in zip(probs.tolist(), index.tolist())}
    lines = [f"**{name}**: {parameters(name):,} parameters, predicts **{maps.label}** ({maps.probability:.1%})."]
    lines += [f'- note: {n}' for n in maps.notes]
    return Answer(maps, draw_mosaic(maps, patch=patch), top, '\n'.join(lines))


def compare(first: str, second: str, image: Image.Image) -> Tuple[Answer, Answer, str]:
    """The answers of two checkpoints on one image, and a table of the two."""
    a, b = answer(first, image), answer(second, image)
    rows = ['| checkpoint | parameters | prediction | probability |', '|---|---:|---|---:|']
    for name, one in ((first, a), (second, b)):
        label, p = next(iter(one.top.items()))
        rows.append(f'| `{name}` | {parameters(name):,} | {label} | {p:.1%} |')
    return a, b, '\n'.join(rows)


def _guard(gr: Any, fn: Any) -> Any:
    """``fn`` with an ``AppInputError`` shown in the page (gradio's error toast) instead of a traceback."""
    @functools.wraps(fn)
    def wrapped(*args):
        try:
            return fn(*args)
        except (AppInputError, AttentionInputError, ImageTooLarge) as e:
            raise gr.Error(str(e)) from e
    return wrapped


def _input_image(sketch: Any, upload: Optional[str], source: str) -> Image.Image:
    return sketch_to_image(sketch) if source == 'drawing' else open_upload(upload)


def _inputs(gr: Any) -> Tuple[Any, Any, Any]:
    """The input choice, a sketchpad, and an upload with the shipped examples as thumbnails to click."""
    source = gr.Radio(['drawing', 'image'], value='image', label='analyse')
    with gr.Row():
        sketch = gr.Sketchpad(label='draw a digit', type='pil', canvas_size=(280, 280),
                              brush=gr.Brush(colors=['#000000'], default_size=18), layers=False)
        upload = gr.File(label='an image file', file_types=['image'], type='filepath')
    examples = example_images()
    thumbnails = gr.Gallery([(path, Path(path).stem) for path in examples], label='test images that ship with the package: click one', columns=len(examples),
                            height=110, allow_preview=False, object_fit='contain')

    def pick(selected: gr.SelectData) -> str:  # the thumbnail clicked becomes the uploaded file
        return examples[selected.index]
    thumbnails.select(pick, None, upload, api_name=False)
    sketch.change(lambda: 'drawing', None, source, api_name=False)  # the input last touched is analysed
    upload.change(lambda: 'image', None, source, api_name=False)
    return source, sketch, upload


def _on_click(gr: Any, figure: Any, shown: Any, summary: Any = None) -> None:
    """A click on ``figure``, the mosaic of the answer in the state ``shown``, shows where the patch under it looks
    (and says so in ``summary``, where given)."""
    def clicked(answer_shown: Optional[Answer], selected: gr.SelectData) -> Tuple[Any, ...]:
        text, image, clicked_answer = _clicked(answer_shown, selected.index)
        return (text, image, clicked_answer) if summary is not None else (image, clicked_answer)
    figure.select(_guard(gr, clicked), shown, ([summary] if summary is not None else []) + [figure, shown],
                  api_name=False)


def _explore_tab(gr: Any, checkpoints: List[str]) -> None:
    """The Explore tab: a checkpoint, an input, the answer, and clicks on its mosaic (``/explore``, ``/look``)."""
    name = gr.Dropdown(checkpoints, value=DEFAULT_CHECKPOINT if DEFAULT_CHECKPOINT in checkpoints
                       else checkpoints[0], label='checkpoint')
    source, sketch, upload = _inputs(gr)
    run = gr.Button('Analyse', variant='primary')
    summary = gr.Markdown()
    top = gr.Label(num_top_classes=TOP_K, label='top-5 classes')
    figure = gr.Image(label='attention per layer and head, rollout, S and A = softmax(S): click a patch',
                      type='pil', interactive=False, show_label=False)  # the mosaic has its own title
    shown = gr.State()  # the answer on the page, for clicks on its mosaic
    run.click(_guard(gr, explore), [name, sketch, upload, source], [summary, top, figure, shown],
              api_name='explore')
    _on_click(gr, figure, shown, summary)
    with gr.Row(visible=False):  # the API of a click: /look with the patch's row and column
        row, column = gr.Number(1, precision=0, label='patch_row'), gr.Number(1, precision=0, label='patch_column')
        gr.Button('look').click(_guard(gr, look), [name, sketch, upload, source, row, column], [summary, figure],
                                api_name='look')


def build_app(checkpoints: Sequence[str], pair: Sequence[str] = DEFAULT_PAIR) -> Any:
    """The gradio Blocks of the explorer over ``checkpoints``."""
    gr = require_gradio()
    checkpoints = list(checkpoints)
    pair = [p if p in checkpoints else checkpoints[min(i, len(checkpoints) - 1)] for i, p in enumerate(pair)]
    # gradio decodes a sketch itself: PIL's own bound (an error at twice it) stops a crafted 150-megapixel one there
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    # uploads and sketches are kept in gradio's cache: checked hourly, removed after a day and when the server stops
    with gr.Blocks(title='timm-minimal attention explorer', delete_cache=(3600, 86400)) as app:
        gr.Markdown('# Minimal transformers: where they look\nThe shipped checkpoints of timm-minimal '
                    '(Bermeitinger et al., "Reducing the Transformer Architecture to a Minimum", KDIR 2024).')
        with gr.Tab('Explore'):
            _explore_tab(gr, checkpoints)
        with gr.Tab('Compare'):
            with gr.Row():
                first = gr.Dropdown(checkpoints, value=pair[0], label='first checkpoint')
                second = gr.Dropdown(checkpoints, value=pair[1], label='second checkpoint')
            source2, sketch2, upload2 = _inputs(gr)
            run2 = gr.Button('Compare', variant='primary')
            table = gr.Markdown()
            with gr.Row():
                top_a = gr.Label(num_top_classes=TOP_K, label='first checkpoint: top-5 classes')
                top_b = gr.Label(num_top_classes=TOP_K, label='second checkpoint: top-5 classes')
            with gr.Row():
                fig_a = gr.Image(type='pil', label='first checkpoint: attention per layer and head', show_label=False,
                                 interactive=False)
                fig_b = gr.Image(type='pil', label='second checkpoint: attention per layer and head', show_label=False,
                                 interactive=False)
            shown_a, shown_b = gr.State(), gr.State()
            run2.click(_guard(gr, compare_api), [first, second, sketch2, upload2, source2],
                       [table, top_a, fig_a, top_b, fig_b, shown_a, shown_b], api_name='compare')
            _on_click(gr, fig_a, shown_a)
            _on_click(gr, fig_b, shown_b)
    return app


def explore(checkpoint: str, sketch: Any = None, image: Optional[str] = None,
            source: str = 'image') -> Tuple[str, Dict[str, float], Image.Image, Answer]:
    """The Explore tab and its API (``/explore``): the summary, top-5 classes and attention mosaic of
    ``checkpoint`` on ``image`` (a file) or on ``sketch`` (a drawing), whichever ``source`` names (and the answer,
    kept in the page for clicks; the API does not return it)."""
    a = answer(checkpoint, _input_image(sketch, image, source))
    return a.text, a.top, a.mosaic.image, a


def look(checkpoint: str, sketch: Any = None, image: Optional[str] = None, source: str = 'image',
         patch_row: float = 1, patch_column: float = 1) -> Tuple[str, Image.Image]:
    """The API of a click (``/look``): the summary and the mosaic of where the patch in ``patch_row``,
    ``patch_column`` (1-based, from the top left) looks, in every layer and head."""
    grid = load_checkpoint(checkpoint).patch_embed.grid_size
    not_whole = [v for v in (patch_row, patch_column)
                 if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v != int(v)]
    if not_whole:
        raise AppInputError(f'patch_row and patch_column must be whole numbers (rows 1 to {grid[0]}, columns 1 to '
                            f'{grid[1]} of {checkpoint}), got {patch_row!r} and {patch_column!r}')
    image_in = _input_image(sketch, image, source)
    patch = int(patch_row) - 1, int(patch_column) - 1
    if not (0 <= patch[0] < grid[0] and 0 <= patch[1] < grid[1]):
        raise AppInputError(f'patch ({int(patch_row)}, {int(patch_column)}) is outside the patch grid of '
                            f'{checkpoint}: rows 1 to {grid[0]}, columns 1 to {grid[1]}')
    a = answer(checkpoint, image_in, patch)
    return _looking(a, patch), a.mosaic.image


def _looking(a: Answer, patch: Tuple[int, int]) -> str:
    return f'{a.text}\n\nWhere patch ({patch[0] + 1}, {patch[1] + 1}) looks (outlined); click another patch.'


def _clicked(shown: Optional[Answer], index: Any) -> Tuple[str, Image.Image, Answer]:
    """A click at pixel ``index`` (x, y) of the mosaic: where the patch under it looks (a click outside the images
    keeps the picture)."""
    if shown is None:
        raise AppInputError('analyse an image first, then click a patch of it')
    patch = shown.mosaic.patch_at(*index[:2]) if isinstance(index, (list, tuple)) and len(index) >= 2 else None
    if patch is None:
        return shown.text, shown.mosaic.image, shown
    clicked = Answer(shown.maps, draw_mosaic(shown.maps, patch=patch), shown.top, shown.text)
    return _looking(clicked, patch), clicked.mosaic.image, clicked


def compare_api(first_checkpoint: str, second_checkpoint: str, sketch: Any = None, image: Optional[str] = None,
                source: str = 'image') -> Tuple[Any, ...]:
    """The Compare tab and its API (``/compare``): the table, then the top-5 classes and mosaic of each (and the two
    answers, kept in the page for clicks; the API does not return them)."""
    a, b, table = compare(first_checkpoint, second_checkpoint, _input_image(sketch, image, source))
    return table, a.top, a.mosaic.image, b.top, b.mosaic.image, a, b


def _refusals_name_no_server_paths() -> None:
    """gradio refuses a file that an API call names but did not upload with the file's absolute path on this server
    ('Cannot move /srv/app/x.png ...', a relative name resolved against the server's working folder): the refusal
    names the file alone. Where gradio checks files otherwise, nothing changes."""
    from gradio import processing_utils  # lazy: the app extra
    from gradio.exceptions import InvalidPathError  # lazy: the app extra
    check = getattr(processing_utils, '_check_allowed', None)
    if check is None or getattr(check, 'names_no_paths', False):
        return

    @functools.wraps(check)
    def checked(path: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return check(path, *args, **kwargs)
        except InvalidPathError:
            raise InvalidPathError(f'{Path(str(path)).name}: this app reads only the files uploaded to it; upload the '
                                   f'image (gradio_client: handle_file(path))') from None
    checked.names_no_paths = True
    processing_utils._check_allowed = checked


def launch(app: Any, host: str = '127.0.0.1', port: Optional[int] = None, block: bool = True) -> Any:
    """Serve ``app`` on ``host`` (never a public share link); returns once it serves unless ``block``."""
    gr = require_gradio()
    _refusals_name_no_server_paths()
    theme = gr.themes.Default(font=['ui-sans-serif', 'system-ui', 'sans-serif'],
                              font_mono=['ui-monospace', 'monospace'])  # no web fonts: the page works offline
    app.launch(server_name=host, server_port=port, share=False, inbrowser=False, prevent_thread_lock=not block,
               quiet=True, theme=theme, show_error=True, max_file_size=MAX_UPLOAD)
    return app


def _check_port(host: str, port: int) -> None:
    """Raise the OS error of binding ``host:port`` (in use, not an address of this machine) before anything is
    printed or built; the command-line layer reports it in one line."""
    with socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as e:
            e.filename = f'{host}:{port}'
            raise


@command('timm-minimal-app')
def main(argv: Optional[Sequence[str]] = None) -> int:
    os.environ.setdefault('GRADIO_ANALYTICS_ENABLED', 'False')
    parser = app_parser()
    args = parser.parse_args(argv)
    require_gradio()
    shipped = shipped_checkpoints()
    unknown = [n for n in (args.checkpoints or []) if n not in shipped]
    if unknown:
        parser.error(f'unknown checkpoint {unknown[0]!r}; the shipped ones are {", ".join(shipped)}')
    checkpoints = args.checkpoints or shipped
    _check_port(args.host, args.port)
    print(f'{PROG}: serving {len(checkpoints)} checkpoint(s) on http://{args.host}:{args.port}', flush=True)
    _stop_on_signals()
    with _own_upload_folder():
        launch(build_app(checkpoints), args.host, args.port, block=True)
    return 0


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP stop the server as Ctrl-C does (their default action ended the process at once)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


@contextlib.contextmanager
def _own_upload_folder() -> Iterator[None]:
    """Uploads and sketches go to a folder of this server's own (inside GRADIO_TEMP_DIR where it is set), removed
    when the server stops: gradio removes its files only where its shutdown finishes, and a stop while a client
    was still connected left an upload behind."""
    base = os.environ.get('GRADIO_TEMP_DIR')
    if base:
        os.makedirs(base, exist_ok=True)
    folder = tempfile.mkdtemp(prefix='timm-minimal-app-', dir=base or None)
    os.environ['GRADIO_TEMP_DIR'] = folder
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if base:
            os.environ['GRADIO_TEMP_DIR'] = base
        else:
            os.environ.pop('GRADIO_TEMP_DIR', None)


if __name__ == '__main__':
    sys.exit(main())
