"""Progress on the waits: ``timm_minimal.cli.progress`` draws tqdm's bar on a terminal unless the command line said
``-q`` or ``--no-progress``; the first decode of an archive and the evaluation show one (on a real terminal: a
pseudo-terminal here)."""
import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import tarfile
import termios
import time

import pytest
from PIL import Image

from timm_minimal import cli
from timm_minimal.training.data.loading import CIFAR10_CLASSES


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize('argv, shown', [([], True), (['-q'], False), (['--no-progress'], False),
                                         (['--', '-q'], True)])
def test_a_bar_shows_on_a_terminal_unless_the_command_line_says_q_or_no_progress(argv, shown):
    @cli.command('tool')
    def main(argv):
        return 0 if cli.progress(range(3), file=Terminal()).disable is not shown else 1
    try:
        assert main(argv) == 0
    finally:
        cli._PROGRESS['shown'] = True
    assert cli.progress(range(3), file=io.StringIO()).disable  # not a terminal: no bar


def test_a_timed_bar_fills_when_the_wait_is_over():
    with cli.timed_progress(30, 'measuring', file=Terminal()) as bar:
        time.sleep(1.2)
        assert 1 <= bar.n < 30  # with the clock
    assert bar.n == bar.total == 30


def _archive(root):
    (root / 'CIFAR10').mkdir(parents=True)
    with tarfile.open(root / 'CIFAR10' / 'cifar10-jpeg-q75.tar.gz', 'w:gz') as tar:
        for split, n in (('train', 2), ('test', 3)):
            for c, name in enumerate(CIFAR10_CLASSES):
                for i in range(n):
                    buf = io.BytesIO()
                    Image.new('RGB', (32, 32), (25 * c, 60 * i, 99)).save(buf, format='JPEG')
                    info = tarfile.TarInfo(f'{split}/{name}/{i:04d}.jpg')
                    info.size = len(buf.getvalue())
                    tar.addfile(info, io.BytesIO(buf.getvalue()))


def _on_a_terminal(argv, env):
    """What a command writes to a 120-column pseudo-terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack('HHHH', 40, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b''
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the command closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0, out.decode(errors='replace')[-2000:]
    return out.decode(errors='replace')


@pytest.mark.slow  # several seconds: the whole suite runs it
def test_evaluate_shows_the_archives_first_decode_and_the_evaluation(tmp_path):
    _archive(tmp_path / 'data')
    env = dict(os.environ, TIMM_MINIMAL_CACHE=str(tmp_path / 'cache'), OMP_NUM_THREADS='1')
    command = [sys.executable, '-m', 'timm_minimal.tools.evaluate', '--model', 'vit_minimal_sym_6x4.cifar10',
               '--dataset', 'cifar10', '--data-dir', str(tmp_path / 'data')]
    out = _on_a_terminal(command, env)
    for bar in ('reading cifar10-jpeg-q75.tar.gz (once):', 'decoding train/ of cifar10-jpeg-q75.tar.gz (once):',
                'decoding test/ of cifar10-jpeg-q75.tar.gz (once):', 'evaluating on cifar10 test:'):
        assert bar in out, bar
    assert 'top-1' in out
    quiet = _on_a_terminal(command + ['--no-progress'], env)
    assert 'evaluating on' not in quiet and 'top-1' in quiet
