"""The attention explorer (timm-minimal-app): a real server on a free local port, driven over HTTP by
gradio_client and opened in a real headless browser (Debian's chromium through Playwright)."""
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

gradio = pytest.importorskip('gradio', reason='the app extra is not installed: pip install -e ".[app]"')
from gradio_client import Client, handle_file  # noqa: E402

from timm_minimal.tools.inside import app as app_mod  # noqa: E402
from timm_minimal.tools.inside.mosaic import LABEL_WIDTH, PANEL, TITLE  # noqa: E402

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
CHECKPOINTS = ['vit_minimal_sym_6x4.mnist', 'vit_minimal_std_mlp_6x1.mnist', 'vit_minimal_sym_6x4.cifar10']


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.fixture(scope='module')
def server():
    os.environ.setdefault('GRADIO_ANALYTICS_ENABLED', 'False')
    port = _free_port()
    app = app_mod.launch(app_mod.build_app(CHECKPOINTS), port=port, block=False)
    yield f'http://127.0.0.1:{port}/'
    app.close()


@pytest.fixture(scope='module')
def client(server):
    return Client(server, verbose=False)


def _example(prefix):
    return next(p for p in app_mod.example_images() if Path(p).name.startswith(prefix))


@pytest.mark.slow
def test_a_shipped_test_digit_is_recognised_over_http(client):
    digit = _example('mnist_test0_digit7')
    t0 = time.perf_counter()
    summary, top, figure = client.predict('vit_minimal_sym_6x4.mnist', None, handle_file(digit), 'image',
                                          api_name='/explore')
    first_answer = time.perf_counter() - t0
    assert top['label'] == '7' and 'predicts **7**' in summary and '70,930 parameters' in summary
    assert len(top['confidences']) == 5
    with Image.open(figure) as im:
        assert im.size[0] > 400 and im.size[1] > 400
    assert first_answer < 30, first_answer


def test_a_drawing_is_white_ink_on_black(client, tmp_path):
    canvas = np.zeros((280, 280, 4), np.uint8)
    canvas[40:240, 130:150] = (0, 0, 0, 255)  # a black vertical stroke on a transparent canvas: a one
    path = tmp_path / 'sketch.png'
    Image.fromarray(canvas, 'RGBA').save(path)
    sketch = dict(background=None, layers=[], composite=handle_file(str(path)))
    summary, top, _ = client.predict('vit_minimal_sym_6x4.mnist', sketch, None, 'drawing', api_name='/explore')
    assert top['label'] == '1', top


def test_two_checkpoints_side_by_side(client):
    table, top_a, _, top_b, _ = client.predict('vit_minimal_std_mlp_6x1.mnist', 'vit_minimal_sym_6x4.mnist', None,
                                               handle_file(_example('mnist_test1_digit2')), 'image', api_name='/compare')
    assert top_a['label'] == top_b['label'] == '2'
    assert '| `vit_minimal_std_mlp_6x1.mnist` | 279,106 |' in table and '| `vit_minimal_sym_6x4.mnist` | 70,930 |' in table


@pytest.mark.slow
def test_bad_inputs_get_a_message_and_the_server_keeps_serving(client, tmp_path):
    not_image = tmp_path / 'notes.png'
    not_image.write_text('not an image')
    huge = tmp_path / 'huge.png'
    Image.new('1', (6000, 6000)).save(huge)
    empty = tmp_path / 'empty.png'
    Image.fromarray(np.zeros((280, 280, 4), np.uint8), 'RGBA').save(empty)
    cases = [
        (('vit_minimal_sym_6x4.mnist', None, handle_file(str(not_image)), 'image'), 'cannot read notes.png as an image'),
        (('vit_minimal_sym_6x4.mnist', None, handle_file(str(huge)), 'image'), 'megapixels'),
        (('vit_minimal_sym_6x4.mnist', dict(background=None, layers=[], composite=handle_file(str(empty))), None,
          'drawing'), 'the sketch is empty'),
        (('vit_minimal_sym_6x4.mnist', None, None, 'image'), 'no image'),
    ]
    for args, message in cases:
        with pytest.raises(Exception, match=message):
            client.predict(*args, api_name='/explore')
    # an image of another mode and size: answered, with a note on the conversion
    cmyk = tmp_path / 'photo.jpg'
    Image.new('CMYK', (90, 60), (0, 0, 0, 255)).save(cmyk)
    summary, top, _ = client.predict('vit_minimal_sym_6x4.cifar10', None, handle_file(str(cmyk)), 'image',
                                     api_name='/explore')
    assert 'resized' in summary and 'converted to RGB' in summary
    summary, top, _ = client.predict('vit_minimal_sym_6x4.mnist', None, handle_file(_example('mnist_test3_digit0')),
                                     'image', api_name='/explore')
    assert top['label'] == '0'


def test_command_line_misuse_is_one_line(capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        app_mod.main(['--checkpoints', 'vit_minimal_nope.mnist'])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count('\n') == 1 and "unknown checkpoint 'vit_minimal_nope.mnist'" in err
    monkeypatch.setitem(sys.modules, 'gradio', None)  # as if the extra were not installed
    assert app_mod.main([]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'pip install -e ".[app]"' in err


def test_a_port_in_use_is_one_line_before_serving(capsys):
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert app_mod.main(['--port', str(port), '--checkpoints', 'vit_minimal_sym_6x4.mnist']) == 1
    out, err = capsys.readouterr()
    assert 'serving' not in out and err.count('\n') == 1 and 'Traceback' not in err
    assert f'127.0.0.1:{port}: the address is in use by another program' in err


def test_an_oversized_sketch_or_a_long_strip_is_refused_with_a_message(client, tmp_path):
    """Sizes are checked from the shape or the header before anything is decoded in full or resized: a strip of
    1,000,000 x 1 pixels (3 kB as a PNG) would otherwise grow to 28,000,000 x 28 in the resize to the input."""
    with pytest.raises(app_mod.ImageTooLarge, match='a side over 16,384 pixels'):
        app_mod.sketch_to_image({'composite': np.zeros((1, 1_000_000, 4), np.uint8)})
    with pytest.raises(app_mod.ImageTooLarge, match='ratio over 64:1'):
        app_mod.sketch_to_image(Image.new('RGBA', (3000, 10)))
    strip = tmp_path / 'strip.png'
    Image.new('L', (1_000_000, 1)).save(strip)
    with pytest.raises(Exception, match='a side over 16,384 pixels'):
        client.predict('vit_minimal_sym_6x4.mnist', None, handle_file(str(strip)), 'image', api_name='/explore')
    huge = tmp_path / 'huge.png'
    huge.write_bytes(b'\x89PNG' + bytes(21 << 20))  # over the upload cap: refused by gradio before the app sees it
    with pytest.raises(Exception, match='(?i)file size|too large|exceed'):
        client.predict('vit_minimal_sym_6x4.mnist', None, handle_file(str(huge)), 'image', api_name='/explore')
    summary, top, _ = client.predict('vit_minimal_sym_6x4.mnist', None, handle_file(_example('mnist_test0_digit7')),
                                     'image', api_name='/explore')
    assert top['label'] == '7'  # still serving


# the answer's mosaic: the widest image on the page
MOSAIC_INDEX = ("(() => { const w = [...document.images].map(i => i.naturalWidth); "
                "return w.indexOf(Math.max(...w)); })()")
MOSAIC_SHOWN = "Math.max(...[...document.images].map(i => i.naturalWidth)) > 600"


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason='no chromium here (apt-get install chromium); .ci/run installs it')
def test_the_page_renders_in_a_real_browser(server, tmp_path):
    sync_api = pytest.importorskip('playwright.sync_api', reason='playwright is not installed')
    shot = Path(os.environ.get('APP_SCREENSHOT', tmp_path / 'app.png'))
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
            '--disable-sync', '--no-first-run', '--disable-quic'])
        try:
            page = browser.new_page(viewport={'width': 1280, 'height': 1400})
            page.goto(server, wait_until='domcontentloaded')
            page.get_by_text('where they look').wait_for(timeout=60_000)
            page.locator('img[src*="mnist_test0_digit7"]').first.click()  # its thumbnail in the gallery
            page.wait_for_function("document.body.innerText.includes('.png')", timeout=30_000)  # now the upload
            page.get_by_role('button', name='Analyse').click()
            page.get_by_text('predicts').first.wait_for(timeout=60_000)
            assert 'predicts 7' in page.inner_text('body').replace('*', '')
            page.wait_for_function(MOSAIC_SHOWN, timeout=30_000)
            mosaic = page.locator('img').nth(page.evaluate(MOSAIC_INDEX))
            (width, height), box = mosaic.evaluate('i => [i.naturalWidth, i.naturalHeight]'), mosaic.bounding_box()
            scale = min(box['width'] / width, box['height'] / height)  # shown whole, centred in its box
            x0, y0 = (box['width'] - width * scale) / 2, (box['height'] - height * scale) / 2
            left, top = LABEL_WIDTH + 5 * PANEL // 8, 2 * TITLE + 5 * PANEL // 8  # the input panel's patch (3, 3)
            mosaic.click(position={'x': x0 + left * scale, 'y': y0 + top * scale})
            page.get_by_text('looks (outlined)').first.wait_for(timeout=30_000)
            body = page.inner_text('body')
            assert 'Where patch (3, 3) looks' in body, body[body.find('Where'):][:200]
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 20_000


def test_the_api_names_its_parameters_and_the_sketch_is_optional(client, server):
    """gradio_client users see checkpoint, sketch, image and source, and need no sketch to analyse an image."""
    info = client.view_api(return_format='dict', print_info=False)['named_endpoints']
    explore = [p['parameter_name'] for p in info['/explore']['parameters']]
    compare = [p['parameter_name'] for p in info['/compare']['parameters']]
    assert explore == ['checkpoint', 'sketch', 'image', 'source']
    assert compare == ['first_checkpoint', 'second_checkpoint', 'sketch', 'image', 'source']
    assert [len(info[e]['returns']) for e in ('/explore', '/compare')] == [3, 5]  # the answers kept for clicks are not
    optional = {p['parameter_name'] for p in info['/explore']['parameters'] if p['parameter_has_default']}
    assert {'sketch', 'image', 'source'} <= optional
    summary, top, _ = client.predict(checkpoint='vit_minimal_sym_6x4.mnist',
                                     image=handle_file(_example('mnist_test0_digit7')), api_name='/explore')
    assert top['label'] == '7'


def test_a_click_on_a_patch_shows_where_it_looks_in_every_layer_and_head():
    """The mosaic maps a click on any image panel to the patch under it; the heads then show that patch's row of A
    on one square-root scale, and a click between the panels keeps the picture."""
    from timm_minimal.tools.inside.mosaic import GAP, LABEL_WIDTH, PANEL, head_maps
    shown = app_mod.answer('vit_minimal_sym_6x4.cifar10', Image.open(_example('cifar10_test_horse_0000')))
    mosaic, maps = shown.mosaic, shown.maps
    assert maps.grid == (8, 8) and len(mosaic.panels) == 2 + 6 * 4  # input, rollout, 6 layers x 4 heads
    left, top = mosaic.panels[2]  # layer 1, head 1
    x, y = left + 5 * PANEL // 8 + 1, top + 2 * PANEL // 8 + 1  # inside patch (row 2, column 5), 0-based
    assert mosaic.patch_at(x, y) == (2, 5) and mosaic.patch_at(*mosaic.panels[0]) == (0, 0)
    assert mosaic.patch_at(LABEL_WIDTH - GAP, top) is None
    text, image, clicked = app_mod._clicked(shown, [x, y])
    assert 'Where patch (3, 6) looks' in text and clicked.maps is maps
    assert not np.array_equal(np.asarray(image), np.asarray(mosaic.image))
    rows = head_maps(maps, (2, 5))
    expected = [a[:, 2 * 8 + 5, :] for a in maps.attentions]
    peak = max(float(e.max()) for e in expected)
    for got, want in zip(rows, expected):
        assert torch.allclose(got, (want / peak).sqrt())
    assert max(float(r.max()) for r in rows) == pytest.approx(1.0)
    assert app_mod._clicked(shown, [LABEL_WIDTH - GAP, top])[1] is mosaic.image  # between the panels: unchanged
    with pytest.raises(app_mod.AppInputError, match='analyse an image first'):
        app_mod._clicked(None, [x, y])
    first, second, table = app_mod.compare('vit_minimal_std_mlp_6x1.cifar10', 'vit_minimal_sym_6x4.cifar10',
                                           Image.open(_example('cifar10_test_horse_0000')))
    assert '| `vit_minimal_std_mlp_6x1.cifar10` |' in table and len(first.mosaic.panels) == 2 + 6 * 1
    assert 'Where patch (3, 6) looks' in app_mod._clicked(second, [x, y])[0]  # each compared mosaic takes clicks


def test_the_look_api_takes_a_patch_by_row_and_column(client):
    info = client.view_api(return_format='dict', print_info=False)['named_endpoints']['/look']
    assert [p['parameter_name'] for p in info['parameters']] == ['checkpoint', 'sketch', 'image', 'source',
                                                                   'patch_row', 'patch_column']
    summary, figure = client.predict(checkpoint='vit_minimal_sym_6x4.mnist', image=handle_file(_example('mnist_test0_digit7')),
                                     patch_row=2, patch_column=3, api_name='/look')
    assert 'Where patch (2, 3) looks' in summary and 'predicts **7**' in summary
    with Image.open(figure) as im:
        assert im.size[0] > 400 and im.size[1] > 400
    with pytest.raises(Exception, match='outside the patch grid .* rows 1 to 4, columns 1 to 4'):
        client.predict(checkpoint='vit_minimal_sym_6x4.mnist', image=handle_file(_example('mnist_test0_digit7')),
                       patch_row=5, patch_column=1, api_name='/look')
    with pytest.raises(Exception, match=r'patch_row and patch_column must be whole numbers \(rows 1 to 4, columns 1 '
                                        r'to 4 of vit_minimal_sym_6x4.mnist\), got None and 1'):
        client.predict(checkpoint='vit_minimal_sym_6x4.mnist', image=handle_file(_example('mnist_test0_digit7')),
                       patch_row=None, patch_column=1, api_name='/look')


@pytest.mark.slow
def test_sigterm_stops_the_app_and_removes_the_uploads(tmp_path):
    """The server stopped by SIGTERM (a service manager's stop) as by Ctrl-C, while a client is still connected: its
    uploads go with it; the default action of the signal ended the process with an 18.8 MB upload left behind."""
    import signal
    import subprocess
    port, cache = _free_port(), tmp_path / 'gradio'
    env = dict(os.environ, GRADIO_TEMP_DIR=str(cache), GRADIO_ANALYTICS_ENABLED='False')
    proc = subprocess.Popen([sys.executable, '-m', 'timm_minimal.tools.inside.app', '--port', str(port),
                             '--checkpoints', 'vit_minimal_sym_6x4.mnist'], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert 'serving 1 checkpoint(s)' in proc.stdout.readline()
        deadline = time.monotonic() + 120
        while True:
            try:
                client = Client(f'http://127.0.0.1:{port}/', verbose=False)
                break
            except Exception:  # noqa: BLE001 (not serving yet)
                assert time.monotonic() < deadline and proc.poll() is None, 'the app did not start'
                time.sleep(1)
        upload = tmp_path / 'upload.png'
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (1200, 1200, 3), dtype=np.uint8)).save(upload)
        client.predict('vit_minimal_sym_6x4.mnist', None, handle_file(upload), 'image', api_name='/explore')
        assert list(cache.rglob('upload.png'))  # the server keeps its copy while it runs
        proc.send_signal(signal.SIGTERM)
        said = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0 and not list(cache.rglob('upload.png')), said
    assert not list(cache.glob('timm-minimal-app-*'))  # the server's own folder there, removed with what it held


def test_a_file_the_api_did_not_upload_is_refused_without_a_server_path(server):
    """gradio's refusal named the file's absolute path on the server (a relative name resolved against its working
    folder): it names the file alone."""
    import json
    import urllib.request
    call = f'{server}gradio_api/call/explore'
    for path in ('relative.png', '/etc/hostname.png', '../../up.png'):
        body = json.dumps({'data': ['vit_minimal_sym_6x4.mnist', None,
                                    {'path': path, 'meta': {'_type': 'gradio.FileData'}}, 'image']}).encode()
        request = urllib.request.Request(call, data=body, headers={'Content-Type': 'application/json'})
        event = json.loads(urllib.request.urlopen(request, timeout=60).read())['event_id']
        answer = urllib.request.urlopen(f'{call}/{event}', timeout=60).read().decode()
        assert 'event: error' in answer and 'this app reads only the files uploaded to it' in answer, answer
        assert os.getcwd() not in answer and '/etc' not in answer and Path(path).name in answer, answer
