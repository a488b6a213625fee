"""Files: only regular ones are read, within a size limit; a fix is written only over the file that was
read, keeping its bytes, owner, mode and links, or not at all, and then not counted (issue 15, 3/4/6-10)."""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import pytest
from robustness_support import FINDING, FIXED, invoke, with_finding

import torchlint.run.runner as runner
from torchlint.config import Settings
from torchlint.run.discovery import discover
from torchlint.run.fileio import SourceError, read_regular


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    (tmp_path / "ok.py").write_text(with_finding())
    return tmp_path


def check(*args):
    return invoke("check", "--no-cache", "--jobs", "1", *args)


def fix(*args):
    return invoke("fix", "--apply", "--no-cache", "--jobs", "1", *args)


# --- symlinks and special files --------------------------------------------------------------------
def test_symlink_loops_are_one_tl000_each_and_the_run_goes_on(project):
    os.symlink("b.py", project / "a.py")
    os.symlink("a.py", project / "b.py")
    os.symlink("x.py", project / "x.py")
    walked = check(".")
    assert walked.exit_code == 1, walked.output
    assert "ok.py:5:48: TL501" in walked.output
    for name in ("a.py", "b.py", "x.py"):
        assert f"{name}:1:1: TL000 a symbolic link loop" in walked.output
    named = check("x.py", "ok.py")
    assert "x.py:1:1: TL000 a symbolic link loop" in named.output and "ok.py:5:48: TL501" in named.output


def test_fifos_sockets_and_devices_in_a_tree_are_not_read(project):
    os.mkfifo(project / "fifo.py")
    os.symlink("/dev/zero", project / "zero.py")
    found = discover(["."], Settings(root=project))
    assert [p.name for p in found.files] == ["ok.py"] and found.problems == []


def test_a_special_file_named_explicitly_is_reported(project):
    os.mkfifo(project / "fifo.py")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(project / "sock.py"))
    try:
        result = check("fifo.py", "sock.py", "ok.py")
    finally:
        sock.close()
    assert "fifo.py:1:1: TL000 not a regular file (a FIFO)" in result.output
    assert "sock.py:1:1: TL000 not a regular file (a socket)" in result.output
    assert "ok.py:5:48: TL501" in result.output


def test_reading_never_blocks_on_a_fifo_or_runs_on_forever(project):
    os.mkfifo(project / "fifo.py")
    with pytest.raises(SourceError, match="a FIFO"):
        read_regular(project / "fifo.py", 1024)  # a blocking open would hang here: no writer
    with pytest.raises(SourceError, match="a character device"):
        read_regular(Path("/dev/zero"), 1024)


def test_files_over_max_file_size_get_a_tl000_naming_the_limit(project):
    (project / "big.py").write_text(with_finding("x = 1\n" * 3000))
    result = check("--max-file-size", "10KiB", ".")
    assert "big.py:1:1: TL000 file is 17.7 KiB, over the max-file-size limit of 10.0 KiB" in result.output
    assert "ok.py:5:48: TL501" in result.output
    (project / "torchlint.toml").write_text('max-file-size = "16KiB"\n')
    assert "over the max-file-size limit of 16.0 KiB" in check(".").output
    (project / "torchlint.toml").write_text("max-file-size = 100000\n")
    assert "TL000" not in check(".").output
    (project / "torchlint.toml").write_text('max-file-size = "lots"\n')
    bad = check(".")
    assert bad.exit_code == 2 and "max-file-size" in bad.stderr


# --- writing ---------------------------------------------------------------------------------------
def _sabotage(monkeypatch, action):
    real = runner.process_source

    def process_then_act(source, shown, path, job, project=None):
        result = real(source, shown, path, job, project)
        if job.apply:
            action()
        return result

    monkeypatch.setattr(runner, "process_source", process_then_act)


def test_a_file_deleted_while_fixing_is_not_recreated(project, monkeypatch):
    _sabotage(monkeypatch, lambda: os.unlink("ok.py"))
    result = fix("ok.py")
    assert not (project / "ok.py").exists()
    assert "deleted or renamed while torchlint was fixing it; not written" in result.output
    assert "Fixed 0 problems in 0 files." in result.output


def test_a_file_renamed_while_fixing_is_not_copied_back(project, monkeypatch):
    _sabotage(monkeypatch, lambda: os.rename("ok.py", "moved.py"))
    fix("ok.py")
    assert not (project / "ok.py").exists() and (project / "moved.py").read_text() == with_finding()


def test_a_file_rewritten_while_fixing_keeps_the_new_content(project, monkeypatch):
    _sabotage(monkeypatch, lambda: Path("ok.py").write_text("x = 1\n"))
    result = fix("ok.py")
    assert (project / "ok.py").read_text() == "x = 1\n" and "changed while torchlint was fixing it" in result.output


def test_a_read_only_file_is_not_rewritten_nor_counted(project):
    (project / "ok.py").chmod(0o444)
    result = fix("ok.py")
    assert (project / "ok.py").read_text() == with_finding()
    assert stat.S_IMODE((project / "ok.py").stat().st_mode) == 0o444
    assert "ok.py:1:1: TL000 the file is read-only; not written" in result.output
    assert "ok.py:5:48: TL501" in result.output  # the finding is still there, and said so
    assert "fixed 1" not in result.output and "Fixed 0 problems in 0 files." in result.output


def test_hard_links_are_not_split(project):
    os.link(project / "ok.py", project / "twin.py.bak")
    result = fix("ok.py")
    assert (project / "ok.py").stat().st_ino == (project / "twin.py.bak").stat().st_ino
    assert "2 hard links" in result.output


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_owner_and_group_are_kept(project):
    os.chown(project / "ok.py", 65534, 65534)
    fix("ok.py")
    st = (project / "ok.py").stat()
    assert (st.st_uid, st.st_gid) == (65534, 65534) and FIXED in (project / "ok.py").read_text()


def test_an_unwritable_folder_counts_nothing_as_fixed(project, monkeypatch):
    def no_space(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    result = fix("ok.py")
    assert "cannot write the fixed file" in result.output and "ok.py:5:48: TL501" in result.output
    assert "Fixed 0 problems in 0 files." in result.output and "fixed 1" not in result.output


def test_stale_temporary_files_are_removed_by_the_next_fix(project):
    stale = project / ".ok.py.abcd1234.torchlint.tmp"
    fresh = project / ".ok.py.efgh5678.torchlint.tmp"  # maybe a concurrent run's: left alone
    for path in (stale, fresh):
        path.write_text("partial")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    fix(".")
    assert not stale.exists() and fresh.exists()


# --- bytes -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("original", [
    with_finding().encode() + b"\n\ndef other():\n    a = 1\n\x0c    b = 2\n    c = 3\n    return a\n",
    with_finding().replace("\n", "\r").encode(),
    with_finding().replace("\n", "\r").encode() + b"x = 2",
])
def test_bytes_no_fix_touched_stay_the_same(project, original):
    (project / "ok.py").write_bytes(original)
    fix("ok.py")
    assert (project / "ok.py").read_bytes() == original.replace(FINDING.encode(), FIXED.encode())


@pytest.mark.parametrize("data, expected", [
    (with_finding("s = '\xff'").encode("latin-1"), None),  # undecodable: the buffer comes back as it was
    (b"\xef\xbb\xbf" + with_finding().encode(), b"\xef\xbb\xbf" + with_finding().replace(FINDING, FIXED).encode()),
    (("# -*- coding: latin-1 -*-\n# caf\xe9\n" + with_finding()).encode("latin-1"),
     ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + with_finding().replace(FINDING, FIXED)).encode("latin-1")),
    (with_finding("x = (").encode(), None),
])
def test_stdin_fix_apply_returns_the_buffer_byte_for_byte(project, data, expected):
    result = invoke("fix", "-", "--apply", "--no-cache", input=data)
    assert result.stdout_bytes == (data if expected is None else expected)


def test_stdin_fix_apply_prints_the_input_on_an_internal_error(project, monkeypatch):
    def broken(*args):
        raise ValueError("boom")

    monkeypatch.setattr("torchlint.cli.process_source", broken)
    data = with_finding().encode()
    result = invoke("fix", "-", "--apply", "--no-cache", input=data)
    assert result.exit_code == 2 and result.stdout_bytes == data


# --- links out of the tree, codecs, Python's lines (issue 27, items 3-5) -----------------------------
def test_a_symlink_to_a_file_outside_the_project_is_left_alone(project, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "target.py"
    outside.write_text(with_finding())
    (outside.parent / "other.py").write_text(with_finding())
    os.symlink(outside, project / "link.py")
    os.symlink(outside.parent, project / "linked_folder")
    os.symlink("ok.py", project / "inner_link.py")  # a link inside the project is followed
    result = fix("link.py", "linked_folder/other.py", "inner_link.py")
    assert outside.read_text() == with_finding() == (outside.parent / "other.py").read_text()
    assert f"link.py:1:1: TL000 it is a symbolic link (or in a linked folder) to {outside}, outside the project" \
        in result.output
    assert "linked_folder/other.py:1:1: TL000 it is a symbolic link" in result.output
    assert "link.py:5:48: TL501" in result.output  # the finding is still reported
    assert FIXED in (project / "ok.py").read_text()


def test_the_cache_writes_nothing_through_symlinks(project, tmp_path_factory):
    from torchlint import __version__

    outside = tmp_path_factory.mktemp("elsewhere")
    cache = project / ".torchlint_cache"
    cache.mkdir()
    os.symlink(outside / "tag", cache / "CACHEDIR.TAG")  # dangling links committed to the repository
    os.symlink(outside / "ignore", cache / ".gitignore")
    os.symlink(outside, cache / f"v{__version__}")
    assert invoke("check", "--jobs", "1", ".").exit_code == 1
    assert list(outside.iterdir()) == []
    for name in ("CACHEDIR.TAG", ".gitignore", f"v{__version__}"):
        os.unlink(cache / name)
    cache.rmdir()
    os.symlink(outside, cache)  # the cache folder itself a link
    assert invoke("check", "--jobs", "1", ".").exit_code == 1
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("codec, line", [
    ("unicode_escape", 's = "caf\\u00e9"'),
    ("raw_unicode_escape", 's = "caf\\u00e9"'),
    ("utf-7", 's = "caf+AOk-"'),
])
def test_codecs_that_cannot_write_the_file_back_byte_for_byte_are_not_fixed(project, codec, line):
    data = (f"# -*- coding: {codec} -*-\n{line}\n" + with_finding()).encode("ascii")
    (project / "odd.py").write_bytes(data)
    checked = check("odd.py")
    assert "odd.py:7:48: TL501" in checked.output and "TL000" not in checked.output
    result = fix("odd.py")
    assert (project / "odd.py").read_bytes() == data
    assert f"odd.py:1:1: TL000 the file's encoding ({codec}) does not give its bytes back" in result.output
    assert "Fixed 0 problems in 0 files." in result.output
    piped = invoke("fix", "-", "--apply", "--no-cache", input=data)
    assert piped.stdout_bytes == data and codec in piped.stderr


FORM_FEED_FIRST = 's = "page\x0cbreak"\nt = """one\x0ctwo\n"""\n'  # a form feed inside a line: not a line end


def test_add_noqa_counts_lines_as_python_does(project):
    (project / "ok.py").write_text(FORM_FEED_FIRST + with_finding())
    result = invoke("check", "--add-noqa", "--no-cache", "ok.py")
    assert result.stderr.startswith("Added 1 noqa directive.")
    assert (project / "ok.py").read_text() == FORM_FEED_FIRST + with_finding().replace(FINDING, FINDING + "  # noqa: TL501")
    assert check("ok.py").exit_code == 0


def test_a_whole_file_noqa_after_a_form_feed_counts(project):
    (project / "ok.py").write_text(FORM_FEED_FIRST + "x = 1\n    # torchlint: noqa\n" + with_finding())
    assert check("ok.py").exit_code == 0


def test_full_output_and_diffs_show_python_lines(project):
    (project / "ok.py").write_text(FORM_FEED_FIRST + with_finding())
    full = check("--output-format", "full", "ok.py").output
    assert f"    {FINDING}" in full.replace("\x0c", "")  # the finding's own line is the one shown
    diff = invoke("fix", "--no-cache", "--jobs", "1", "ok.py").output
    assert "No newline at end of file" not in diff and f"-    {FINDING}\n+    {FIXED}\n" in diff


def test_stale_temporary_files_beside_a_link_target_outside_are_left_alone(project, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere")
    (outside / "target.py").write_text(with_finding())
    stale = outside / ".target.py.abcd1234.torchlint.tmp"
    stale.write_text("not ours to remove")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    os.symlink(outside / "target.py", project / "link.py")
    fix("link.py")
    assert stale.exists()
