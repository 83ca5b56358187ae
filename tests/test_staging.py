"""Output folders (timm_minimal.tools.staging): whole or nothing, and only a tool's own output is replaced."""
import errno
import json
from pathlib import Path

import pytest

from timm_minimal.cli import Failure
from timm_minimal.tools.staging import signing_key, staged_folder


class Refused(ValueError):
    pass


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """This test's own cache folder, and so its own signing key."""
    monkeypatch.setenv('TIMM_MINIMAL_CACHE', str(tmp_path / 'cache'))


def _write(out, overwrite=False, files=('a.txt',)):
    with staged_folder(out, overwrite, marker='.mark.json', error=Refused) as stage:
        for name in files:
            (stage / name).write_text(name)


def test_the_folder_appears_whole_with_its_marker(tmp_path):
    _write(tmp_path / 'out', files=('a.txt', 'b.txt'))
    assert sorted(p.name for p in (tmp_path / 'out').iterdir()) == ['.mark.json', 'a.txt', 'b.txt']
    import hashlib
    import hmac
    manifest = json.loads((tmp_path / 'out' / '.mark.json').read_text())
    files = {n: hashlib.sha256(n.encode()).hexdigest() for n in ('a.txt', 'b.txt')}
    signature = hmac.new(signing_key(), json.dumps(files, sort_keys=True).encode(), hashlib.sha256).hexdigest()
    assert manifest == {'format': 'timm-minimal-files/1', 'files': files, 'signature': signature}
    assert sorted(p.name for p in tmp_path.iterdir()) == ['cache', 'out']
    key = tmp_path / 'cache' / 'staging.key'
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32


def test_a_marker_with_the_right_digests_but_not_this_users_signature_proves_nothing(tmp_path, monkeypatch):
    """The digests prove the content, not who listed it: a hand-made marker listing a user's own files with their
    correct digests (unsigned, or signed with another key) gets nothing replaced by --overwrite."""
    import hashlib
    import hmac
    out = tmp_path / 'thesis'
    out.mkdir()
    (out / 'thesis.tex').write_text('keep')
    files = {'thesis.tex': hashlib.sha256(b'keep').hexdigest()}
    other = hmac.new(b'x' * 32, json.dumps(files, sort_keys=True).encode(), hashlib.sha256).hexdigest()
    for forged in ({'format': 'timm-minimal-files/1', 'files': files},
                   {'format': 'timm-minimal-files/1', 'files': files, 'signature': other}):
        (out / '.mark.json').write_text(json.dumps(forged))
        with pytest.raises(Refused, match='did not write .*signed with this user'):
            _write(out, overwrite=True)
        assert (out / 'thesis.tex').read_text() == 'keep'
    _write(tmp_path / 'mine')  # the tool's own output, signed: replaced
    _write(tmp_path / 'mine', overwrite=True, files=('c.txt',))
    monkeypatch.setenv('TIMM_MINIMAL_CACHE', str(tmp_path / 'another-user'))
    with pytest.raises(Refused, match='did not write'):  # another user's key: not proven
        _write(tmp_path / 'mine', overwrite=True)


def test_a_failure_leaves_nothing_and_keeps_the_earlier_output(tmp_path):
    out = tmp_path / 'out'
    _write(out)
    with pytest.raises(KeyError):
        with staged_folder(out, True, marker='.mark.json', error=Refused) as stage:
            (stage / 'half.txt').write_text('x')
            raise KeyError('boom')
    assert sorted(p.name for p in out.iterdir()) == ['.mark.json', 'a.txt']
    assert [p.name for p in tmp_path.iterdir() if p.name != 'cache'] == ['out']


def test_overwrite_replaces_its_own_output_and_empty_folders_only(tmp_path):
    out = tmp_path / 'out'
    _write(out)
    _write(out, overwrite=True, files=('c.txt',))
    assert sorted(p.name for p in out.iterdir()) == ['.mark.json', 'c.txt']
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
        with staged_folder(out, marker='.mark.json', error=Refused):
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


def test_a_forged_or_malformed_marker_proves_nothing(tmp_path):
    """The marker is a claim; only files whose digest it lists are the tool's, so a hand-written marker that names
    a user's files (or is not a listing at all) gets nothing deleted."""
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'thesis.tex').write_text('keep')
    (out / 'src').mkdir()
    (out / 'src' / 'main.c').write_text('keep')
    (out / 'a').write_text('keep')
    for forged in ({'files': ['thesis.tex', 'src', 'a']}, {'files': 'a'},
                   {'format': 'timm-minimal-files/1', 'files': {'thesis.tex': '0' * 64, 'src/main.c': '1' * 64}},
                   {'format': 'timm-minimal-files/1', 'files': {'a': 'not a digest'}}):
        (out / '.mark.json').write_text(json.dumps(forged))
        with pytest.raises(Refused, match='did not write'):
            _write(out, overwrite=True)
    assert (out / 'thesis.tex').read_text() == 'keep' and (out / 'src' / 'main.c').read_text() == 'keep'
    assert (out / 'a').read_text() == 'keep'


def test_a_file_added_to_the_output_while_writing_is_kept(tmp_path):
    """The check runs again at the swap: a file that appears in --output while the tool writes is never replaced,
    with or without overwrite."""
    for overwrite in (False, True):
        out = tmp_path / f'out{overwrite}'
        if overwrite:
            _write(out)
        with pytest.raises(Refused, match='not empty' if not overwrite else r'did not write \(notes.txt\)'):
            with staged_folder(out, overwrite, marker='.mark.json', error=Refused) as stage:
                (stage / 'a.txt').write_text('new')
                out.mkdir(exist_ok=True)
                (out / 'notes.txt').write_text('keep')
        assert (out / 'notes.txt').read_text() == 'keep'
        assert not [p for p in tmp_path.iterdir() if p.name.startswith('.')]


def test_two_writers_to_one_new_folder_do_not_both_succeed(tmp_path):
    out = tmp_path / 'out'
    with pytest.raises(Refused, match='exists and is not empty'):
        with staged_folder(out, marker='.mark.json', error=Refused) as first:
            (first / 'a.txt').write_text('first')
            _write(out, files=('b.txt',))  # the second writer finishes while the first is still writing
    assert sorted(p.name for p in out.iterdir()) == ['.mark.json', 'b.txt']


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
    assert sorted(p.name for p in out.iterdir()) == ['.mark.json', 'newer.txt']
    assert not list(tmp_path.glob('.out.old-*'))
    if step == 'moved_aside':
        assert 'put back the earlier out' in capsys.readouterr().out


def test_a_folder_moved_aside_that_is_not_the_tools_stays(tmp_path):
    """Where the output is in place, a folder of the aside name that the marker does not prove the tool's is left."""
    from timm_minimal.tools.staging import recover
    out = tmp_path / 'out'
    _write(out)
    stranger = tmp_path / '.out.old-abc'
    stranger.mkdir()
    (stranger / 'thesis.tex').write_text('keep')
    assert recover(out, '.mark.json') is None
    assert (stranger / 'thesis.tex').read_text() == 'keep'
