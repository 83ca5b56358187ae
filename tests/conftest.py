import struct
import tempfile
from importlib import resources

import numpy as np
import pytest
import torch

from hub_server import HubServer, configure_client


@pytest.fixture(scope='session', autouse=True)
def _own_cache():
    """The suite's cache folder (``TIMM_MINIMAL_CACHE``: CPU-mode decisions, decoded archives and images,
    locks, the records of outputs) is a temporary one of its own, removed at the end, never the user's
    ``~/.cache/timm_minimal``: a decision measured beside the other tests would steer the user's later runs."""
    with tempfile.TemporaryDirectory(prefix='timm-minimal-cache-', ignore_cleanup_errors=True) as cache, \
            pytest.MonkeyPatch.context() as mp:
        mp.setenv('TIMM_MINIMAL_CACHE', cache)
        yield


@pytest.fixture(autouse=True)
def _console():
    """The package's log on the console at INFO, as every tool shows it: a test that calls a library function
    directly reads its lines where a tool's user reads them (a tool's own ``-q`` or ``-v`` changes the level for
    that test alone)."""
    from timm_minimal.cli import console
    console()
    yield


@pytest.fixture(autouse=True)
def _torch_threads():
    """A test that sets torch's thread count leaves the next test the count it found, so no test depends on the
    order the suite runs in."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture
def counts_through_measure(monkeypatch):
    """For tests that fake the CPU decision's ``measure``, a rate per candidate: the two eager process counts, which
    the decision measures in turns (``measure_split``: the split's speed-up and one process's rate), are measured
    through that fake."""
    from timm_minimal.training.cpu import split

    def in_turns(model, batch, budget, **step):
        alone = split.measure(model, batch, 1, budget, compiled=False, **step)
        return split.measure(model, batch, budget, 1, compiled=False, **step) / alone, alone
    monkeypatch.setattr(split, 'measure_split', in_turns)


@pytest.fixture
def hub_server(tmp_path, monkeypatch):
    """A Hub-compatible server on 127.0.0.1 that ``huggingface_hub`` (and timm/transformers through it)
    talks to for the duration of the test; see ``tests/hub_server.py``."""
    with HubServer(tmp_path / "hub-server") as server:
        configure_client(server, tmp_path / "hf-home", monkeypatch)
        yield server
    assert not server.errors, "hub test server failed:\n" + "\n".join(server.errors)


def _write_idx(path, array):
    """An MNIST idx file: magic (0x08 = unsigned bytes, number of dimensions), big-endian sizes, the bytes."""
    header = struct.pack('>I', 0x0800 | array.ndim) + b''.join(struct.pack('>I', n) for n in array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


@pytest.fixture(scope='session')
def mnist_dir(tmp_path_factory):
    """The first 5,000 training and the 1,000 test digits of the MNIST sample shipped with the package, as the
    four idx files the trainer reads with ``--dataset mnist --data-dir``."""
    with resources.files('timm_minimal').joinpath('data/mnist_sample.npz').open('rb') as f, np.load(f) as d:
        sample = {k: d[k][:5000] for k in d.files}
    root = tmp_path_factory.mktemp('mnist-sample')
    for prefix, split in (('train', 'train'), ('t10k', 'test')):
        _write_idx(root / f'{prefix}-images-idx3-ubyte', sample[f'{split}_images'])
        _write_idx(root / f'{prefix}-labels-idx1-ubyte', sample[f'{split}_labels'])
    return root


@pytest.fixture(scope='module')
def data(mnist_dir):
    """The trainer's options for the bundled MNIST digits (``mnist_dir``)."""
    return ['--data-dir', mnist_dir]


@pytest.fixture
def small_disk(tmp_path):
    """A real file system of a given size (tmpfs), to fill up: ``small_disk(kib)`` mounts one and returns its
    folder; unmounted at the end. Skipped where this process may not mount (not root, or no tmpfs)."""
    import subprocess
    mounted = []

    def make(kib):
        where = tmp_path / f'disk{len(mounted)}'
        where.mkdir()
        r = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={kib}k', 'tmpfs', str(where)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f'cannot mount a small tmpfs to fill up here: {r.stderr.strip() or r.returncode}')
        mounted.append(where)
        return where
    yield make
    for where in mounted:
        subprocess.run(['umount', '-l', str(where)], capture_output=True)


# The time of the quick suite (python -m pytest -m "not slow") within every run, printed at its end (CI's log shows
# it beside the whole suite's): the setup, call and teardown of the tests that are not marked slow.
_QUICK_SECONDS = []


def pytest_runtest_logreport(report):
    if 'slow' not in report.keywords:
        _QUICK_SECONDS.append(report.duration)


def pytest_terminal_summary(terminalreporter):
    if _QUICK_SECONDS:
        terminalreporter.write_line(f'the quick suite (-m "not slow"): {sum(_QUICK_SECONDS):.1f} s of test time in '
                                    f'this run, collection and start-up not counted; the target is 120 s')
