"""Output folders (timm_minimal.tools.staging): whole or nothing, and only a tool's own output is replaced."""
import errno
import json
import os
from pathlib import Path

import pytest

from timm_minimal.cli import Failure
from timm_minimal.tools.staging import recorded_files, recover, staged_folder


class Refused(ValueError):
    pass


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """This test's own cache folder, and so its own records of outputs."""
    monkeypatch.setenv('TIMM_MINIMAL_CACHE', str(tmp_path / 'cache'))


def _write(out, overwrite=False, files=('a.txt',)):
    with staged_folder(out, overwrite, record=True, error=Refused) as stage:
        for name in files:
            (stage / name).write_text(name)


def test_the_folder_appears_whole_and_is_recorded_in_the_cache_not_in_it(tmp_path):
    import hashlib
    _write(tmp_path / 'out', files=('a.txt', 'b.txt'))
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == ['a.txt', 'b.txt']
    assert recorded_files(tmp_path / 'out') == {n: hashlib.sha256(n.encode()).hexdigest() for n in ('a.txt', 'b.txt')}
    assert sorted(p.name for p in tmp_path.iterdir()) == ['cache', 'out']
    assert [p.name for p in (tmp_path / 'cache' / 'outputs').iterdir() if 'swap' in p.name] == []  # no swap under way


def test_a_copy_of_an_output_or_another_users_cache_proves_nothing(tmp_path, monkeypatch):
    """The record names the folder the tool wrote: a copy of it elsewhere is the user's, and so is the output itself
    for a tool with another cache (another user, another machine)."""
    import shutil
    _write(tmp_path / 'mine')
    shutil.copytree(tmp_path / 'mine', tmp_path / 'copy')
    with pytest.raises(Refused, match=r'did not write \(a.txt\)'):
        _write(tmp_path / 'copy', overwrite=True)
    _write(tmp_path / 'mine', overwrite=True, files=('c.txt',))  # the tool's own output: replaced
    monkeypatch.setenv('TIMM_MINIMAL_CACHE', str(tmp_path / 'another-user'))
    with pytest.raises(Refused, match='did not write'):
        _write(tmp_path / 'mine', overwrite=True)
    assert (tmp_path / 'copy' / 'a.txt').read_text() == 'a.txt' and (tmp_path / 'mine' / 'c.txt').is_file()


def test_a_failure_leaves_nothing_and_keeps_the_earlier_output(tmp_path):
    out = tmp_path / 'out'
    _write(out)
    with pytest.raises(KeyError):
        with staged_folder(out, True, record=True, error=Refused) as stage:
            (stage / 'half.txt').write_text('x')
            raise KeyError('boom')
    assert sorted(p.name for p in out.iterdir()) == ['a.txt']
    assert [p.name for p in tmp_path.iterdir() if p.name != 'cache'] == ['out']


def test_overwrite_replaces_its_own_output_and_empty_folders_only(tmp_path):
    out = tmp_path / 'out'
    _write(out)
    _write(out, overwrite=True, files=('c.txt',))
    assert sorted(p.name for p in out.iterdir()) == ['c.txt']
    (tmp_path / 'empty').mkdir()
    _write(tmp_path / 'empty')
    mine = tmp_path / 'mine'
    mine.mkdir()
    (mine / 'thesis.tex').write_text('keep')
    with pytest.raises(Refused, match='did not write'):
        _write(mine, overwrite=True)
    (out / 'extra.txt').write_text('keep')
    with pytest.raises(Refused, match=r'did not write \(extra.txt\)'):
        _write(out, overwrite=True)
    assert (mine / 'thesis.tex').read_text() == 'keep' and (out / 'extra.txt').read_text() == 'keep'
    with pytest.raises(Refused, match='not empty'):
        _write(mine)
    (tmp_path / 'file').write_text('x')
    with pytest.raises(Refused, match='not a folder'):
        _write(tmp_path / 'file', overwrite=True)


def test_the_working_folder_and_its_ancestors_are_never_replaced(tmp_path, monkeypatch):
    work = tmp_path / 'a' / 'b'
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    for out in ('.', '..', '../..', str(tmp_path), '/'):
        with pytest.raises(Refused, match='working folder'):
            _write(out, overwrite=True)
    assert sorted(p.name for p in tmp_path.rglob('*')) == ['a', 'b']


def test_a_full_disk_is_named_and_nothing_is_left(tmp_path):
    out = tmp_path / 'out'
    with pytest.raises(Failure, match='no space left on the device'):
        with staged_folder(out, record=True, error=Refused):
            raise OSError(errno.ENOSPC, 'No space left on device')
    assert [p.name for p in tmp_path.iterdir() if p.name != 'cache'] == []


def test_a_read_only_file_system_is_named_as_such_not_as_a_full_disk(small_disk):
    """A read-only mount has little or no free space to report (a squashfs image reports none, this one 64 KiB);
    the write's own cause is named, where it was put down to a full disk (the export said 'free some space')."""
    import subprocess
    disk = small_disk(64)
    subprocess.run(['mount', '-o', 'remount,ro', str(disk)], check=True, capture_output=True)
    with pytest.raises(Failure) as failed:  # a command line exits 1 with it, as the trainer does
        _write(disk / 'out')
    message = str(failed.value)
    assert message.startswith(f'cannot write {disk / "out"}: {disk}')
    assert message.endswith(': the file system is read-only')
    assert list(disk.iterdir()) == []


def test_a_file_added_to_the_output_while_writing_is_kept(tmp_path):
    """The check runs again at the swap: a file that appears in --output while the tool writes is never replaced,
    with or without overwrite."""
    for overwrite in (False, True):
        out = tmp_path / f'out{overwrite}'
        if overwrite:
            _write(out)
        with pytest.raises(Refused, match='not empty' if not overwrite else r'did not write \(notes.txt\)'):
            with staged_folder(out, overwrite, record=True, error=Refused) as stage:
                (stage / 'a.txt').write_text('new')
                out.mkdir(exist_ok=True)
                (out / 'notes.txt').write_text('keep')
        assert (out / 'notes.txt').read_text() == 'keep'
        assert not [p for p in tmp_path.iterdir() if p.name.startswith('.')]


def test_two_writers_to_one_new_folder_do_not_both_succeed(tmp_path):
    out = tmp_path / 'out'
    with pytest.raises(Refused, match='exists and is not empty'):
        with staged_folder(out, record=True, error=Refused) as first:
            (first / 'a.txt').write_text('first')
            _write(out, files=('b.txt',))  # the second writer finishes while the first is still writing
    assert sorted(p.name for p in out.iterdir()) == ['b.txt']


@pytest.mark.parametrize('step', ['moved_aside', 'renamed_in', 'before_removal'])
def test_a_crash_at_any_step_of_the_swap_leaves_the_output_recoverable(step, tmp_path, monkeypatch, capsys):
    """The swap is: move the earlier output aside, rename the new one in, remove the earlier one. A process killed
    after any of them (simulated by a hard exit at that point) leaves the old output or the new one under the name,
    or one that the next write puts back; nothing of the user's is lost."""
    import shutil
    from timm_minimal.tools import staging
    out = tmp_path / 'out'
    _write(out, files=('old.txt',))

    class Killed(BaseException):
        pass
    real_rename, real_rmtree, renames = Path.rename, shutil.rmtree, []

    def rename(self, target):
        result = real_rename(self, target)
        renames.append(target)
        if (step == 'moved_aside' and len(renames) == 1) or (step == 'renamed_in' and len(renames) == 2):
            raise Killed
        return result

    def rmtree(path, *a, **k):
        if step == 'before_removal' and '.old-' in str(path):
            raise Killed
        return real_rmtree(path, *a, **k)
    with monkeypatch.context() as patched, pytest.raises(Killed):
        patched.setattr(Path, 'rename', rename)
        patched.setattr(staging.shutil, 'rmtree', rmtree)
        _write(out, overwrite=True, files=('new.txt',))
    aside = list(tmp_path.glob('.out.old-*'))
    if step == 'moved_aside':
        assert not out.exists() and len(aside) == 1  # the earlier output, hidden: the next write puts it back
    else:
        assert (out / 'new.txt').is_file()
    _write(tmp_path / 'out', overwrite=True, files=('newer.txt',))  # the next run of the tool
    assert sorted(p.name for p in out.iterdir()) == ['newer.txt']
    assert not list(tmp_path.glob('.out.old-*'))
    if step == 'moved_aside':
        assert 'put back the earlier out' in capsys.readouterr().out


def test_a_folder_named_like_a_swap_is_never_moved_or_deleted(tmp_path, capsys):
    """Recovery reads the swap log this tool wrote, never a folder's name: a user's copy of an output named
    .out.old-pristine stays through a refused write, an overwrite and a write where the output is missing, and a
    hidden backup is never moved into the output."""
    import shutil
    out = tmp_path / 'out'
    _write(out)
    for name in ('.out.old-pristine', '.out.old-2024', '.out.tmp-mine'):
        shutil.copytree(out, tmp_path / name)  # the tool's own files, copied by the user
    with pytest.raises(Refused, match='not empty'):
        _write(out)  # refused: no --overwrite
    _write(out, overwrite=True, files=('b.txt',))
    shutil.rmtree(out)
    _write(out, files=('c.txt',))  # the output is missing: nothing is put back in its place
    assert sorted(p.name for p in out.iterdir()) == ['c.txt'] and 'note:' not in capsys.readouterr().out
    for name in ('.out.old-pristine', '.out.old-2024', '.out.tmp-mine'):
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ['a.txt']
    assert recover(out) is None


@pytest.mark.parametrize('log', ['[]', 'null', '7', '"text"', '[' * 100000 + ']' * 100000, '{"format": 1}', ''])
def test_a_swap_log_that_is_not_one_is_ignored(tmp_path, log):
    from timm_minimal.tools.staging import _record_file
    out = tmp_path / 'out'
    _write(out)
    _record_file(out.resolve(), '.swap.json').write_text(log)
    _write(out, overwrite=True, files=('b.txt',))
    assert sorted(p.name for p in out.iterdir()) == ['b.txt']


def test_a_crash_after_a_new_output_is_in_place_but_not_yet_recorded_is_finished_by_the_next_write(tmp_path,
                                                                                                     monkeypatch):
    from timm_minimal.tools import staging
    out = tmp_path / 'out'

    class Killed(BaseException):
        pass

    real = staging._write_json

    def write_json(path, data):  # the swap log is written; the process dies before the record is
        if 'swap' not in path.name:
            raise Killed
        real(path, data)
    with monkeypatch.context() as patched, pytest.raises(Killed):
        patched.setattr(staging, '_write_json', write_json)
        _write(out, files=('new.txt',))
    assert (out / 'new.txt').is_file() and recorded_files(out) is None
    _write(out, overwrite=True, files=('newer.txt',))  # the swap log proves the output this tool's
    assert sorted(p.name for p in out.iterdir()) == ['newer.txt']


@pytest.mark.parametrize('make', [lambda p: os.mkfifo(p), lambda p: p.symlink_to('/dev/zero')], ids=['fifo', 'dev-zero'])
@pytest.mark.parametrize('suffix', ['.json', '.swap.json'])
def test_a_record_that_is_no_regular_file_is_no_record_and_reads_nothing(tmp_path, make, suffix):
    """A FIFO in place of an output's record or swap log hung every write to that output; a link to /dev/zero read
    gigabytes. Neither is a record: the output is written as if there were none."""
    import signal
    from timm_minimal.tools import staging
    out = tmp_path / 'out'
    record = staging._record_file(staging._resolve(out), suffix)
    record.parent.mkdir(parents=True, exist_ok=True)
    make(record)
    signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError('the record was read as a file')))
    signal.alarm(20)
    try:
        _write(out)
    finally:
        signal.alarm(0)
    assert (out / 'a.txt').is_file()
