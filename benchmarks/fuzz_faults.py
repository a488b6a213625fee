"""Fuzz-and-fault check: inputs and faults that must never crash, hang or corrupt a torchlint run.

Each case builds a small tree in a temporary folder, runs the real command line in a subprocess (so a
native crash or a hang is observed, not suffered) and judges the outcome. It prints a table of cases
tried / survived / failed per category, then every failure with the reason.

    python benchmarks/fuzz_faults.py            # every case (about a minute on 2 cores)
    python benchmarks/fuzz_faults.py --fast     # the subset the test suite runs (a few seconds)

To measure another checkout, put it first on PYTHONPATH (the subprocesses inherit the environment).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# A line every case file carries so the pre-filter cannot skip it: TL501 reports it with a safe fix.
FINDING = "opt = torch.optim.Adam(model.parameters(), foreach=False)"
FIXED = "opt = torch.optim.Adam(model.parameters())"
HEADER = "import torch\n"
TIMEOUT = 60.0


@dataclass
class Outcome:
    returncode: Optional[int]  # None: timed out (killed)
    stdout: bytes
    stderr: bytes
    seconds: float

    @property
    def text(self) -> str:
        return (self.stdout + self.stderr).decode("utf-8", "replace")


def torchlint(args: Sequence[str], cwd: Path, stdin: bytes = b"", timeout: float = TIMEOUT) -> Outcome:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchlint", *args], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        return Outcome(proc.returncode, out, err, time.perf_counter() - start)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Outcome(None, out, err, time.perf_counter() - start)


def sound(outcome: Outcome) -> Optional[str]:
    """Why a run did not end like a linter run should (exit 0 or 1, no internal error), or None."""
    if outcome.returncode is None:
        return f"hung (killed after {outcome.seconds:.0f} s)"
    if outcome.returncode < 0:
        return f"died of signal {-outcome.returncode}"
    if outcome.returncode not in (0, 1):
        return f"exit {outcome.returncode}: {outcome.text.strip().splitlines()[-1:] or ''}"
    if "internal error" in outcome.text or "Traceback" in outcome.text:
        return "internal error: " + outcome.text.strip().splitlines()[0][:120]
    return None


def sibling_reported(outcome: Outcome) -> Optional[str]:
    """Every case puts a normal file ``ok.py`` beside the hostile one: its finding must still be reported."""
    if b"ok.py" not in outcome.stdout or b"TL501" not in outcome.stdout:
        return "the other file's finding is missing: the run lost it"
    return None


def first(*reasons: Optional[str]) -> Optional[str]:
    return next((r for r in reasons if r), None)


# --- generated sources --------------------------------------------------------------------------------

def with_finding(body: str) -> str:
    return HEADER + body + "\n\ndef build(model):\n    " + FINDING + "\n    return opt\n"


DEEP: Dict[str, Callable[[int], str]] = {
    "nested brackets": lambda n: "x = " + "(" * n + "1" + ")" * n,
    "nested lists": lambda n: "x = " + "[" * n + "]" * n,
    "and chain": lambda n: "x = " + " and ".join(["a"] * n),
    "sum chain": lambda n: "x = " + " + ".join(["a"] * n),
    "unary minus": lambda n: "x = " + "-" * n + "a",
    "attribute chain": lambda n: "x = a" + ".b" * n,
    "call chain": lambda n: "x = f" + "()" * n,
    "conditional chain": lambda n: "x = " + " if c else ".join(["a"] * n),
    "lambda chain": lambda n: "x = " + "lambda: " * n + "1",
    "elif chain": lambda n: "if a:\n    pass\n" + "".join(f"elif a == {i}:\n    pass\n" for i in range(n)),
}


def write(folder: Path, name: str, data, mode: Optional[int] = None) -> Path:
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    if mode is not None:
        path.chmod(mode)
    return path


def ok_file(folder: Path) -> None:
    write(folder, "ok.py", with_finding(""))


# --- cases ---------------------------------------------------------------------------------------------

Case = Callable[[Path], Optional[str]]  # returns the reason it failed, or None
CASES: List[tuple] = []  # (category, name, case, fast)


def case(category: str, name: str, fast: bool = False):
    def register(func: Case) -> Case:
        CASES.append((category, name, func, fast))
        return func
    return register


def _deep_case(kind: str, n: int, jobs: int) -> Case:
    def run(tmp: Path) -> Optional[str]:
        ok_file(tmp)
        for i in range(3):  # a few hostile files, so a pool has several to lose
            write(tmp, f"deep{i}.py", with_finding(DEEP[kind](n)))
        out = torchlint(["check", "--no-cache", "--jobs", str(jobs), "."], tmp, timeout=30)
        return first(sound(out), sibling_reported(out),
                     None if out.stdout.count(b"deep") >= 3 else "a hostile file got no line at all")
    return run


for _kind in DEEP:
    for _n, _jobs in ((3_000, 1), (3_000, 2), (10_000, 2)):
        case("deep nesting", f"{_kind} x{_n}, --jobs {_jobs}",
             fast=(_kind, _n, _jobs) == ("nested brackets", 3_000, 1))(_deep_case(_kind, _n, _jobs))


def _valid_case(body: str, expect_finding_line: Optional[int] = None) -> Case:
    """Code CPython compiles: checked like any other file, no TL000."""
    def run(tmp: Path) -> Optional[str]:
        write(tmp, "valid.py", with_finding(body))
        out = torchlint(["check", "--no-cache", "valid.py"], tmp)
        if b"TL000" in out.stdout:
            return "valid Python got TL000: " + out.stdout.decode(errors="replace").splitlines()[0][:150]
        return first(sound(out), None if b"TL501" in out.stdout else "its finding was not reported")
    return run


case("valid edge code", "500-branch if/elif chain")(_valid_case(DEEP["elif chain"](500)))
case("valid edge code", "500-term sum")(_valid_case(DEEP["sum chain"](500)))
case("valid edge code", "5,000 adjacent string literals")(_valid_case("x = (" + " ".join(['"s"'] * 5000) + ")"))
case("valid edge code", "rebinding one name 4,000 times, each used: 10 s")(
    lambda tmp: _timed_valid(tmp, "import numpy as np\n" + "x = np.zeros(3)\nt = torch.tensor(x)\n" * 4000, 10.0))


def _timed_valid(tmp: Path, body: str, limit: float) -> Optional[str]:
    write(tmp, "big.py", with_finding(body))
    out = torchlint(["check", "--no-cache", "big.py"], tmp, timeout=limit * 3)
    return first(sound(out), None if out.seconds <= limit else f"took {out.seconds:.1f} s (limit {limit:.0f} s)")


def _invalid_case(data: bytes) -> Case:
    """Code CPython rejects: a TL000 and the file left alone by fix --apply."""
    def run(tmp: Path) -> Optional[str]:
        path = write(tmp, "bad.py", data)
        out = torchlint(["fix", "--apply", "--no-cache", "bad.py"], tmp)
        if b"TL000" not in out.stdout:
            return "invalid Python got no TL000"
        return first(sound(out), None if path.read_bytes() == data else "the invalid file was rewritten")
    return run


case("invalid code", "NUL inside a string")(_invalid_case(with_finding('s = "a\0b"').encode()))
case("invalid code", "a second BOM")(_invalid_case(b"\xef\xbb\xbf" + with_finding("\ufeffx = 1").encode()))


@case("symlinks", "a.py -> b.py -> a.py", fast=True)
def _loop_pair(tmp: Path) -> Optional[str]:
    ok_file(tmp)
    os.symlink("b.py", tmp / "a.py")
    os.symlink("a.py", tmp / "b.py")
    out = torchlint(["check", "--no-cache", "."], tmp)
    return first(sound(out), sibling_reported(out), None if b"a.py" in out.stdout else "the loop was not reported")


@case("symlinks", "x.py -> x.py, named explicitly")
def _loop_self(tmp: Path) -> Optional[str]:
    ok_file(tmp)
    os.symlink("x.py", tmp / "x.py")
    out = torchlint(["check", "--no-cache", "x.py", "ok.py"], tmp)
    return first(sound(out), sibling_reported(out), None if b"x.py" in out.stdout else "the loop was not reported")


@case("special files", "a FIFO named x.py in the tree")
def _fifo_walked(tmp: Path) -> Optional[str]:
    ok_file(tmp)
    os.mkfifo(tmp / "x.py")
    out = torchlint(["check", "--no-cache", "."], tmp, timeout=20)
    return first(sound(out), sibling_reported(out))


@case("special files", "a FIFO named explicitly", fast=True)
def _fifo_explicit(tmp: Path) -> Optional[str]:
    ok_file(tmp)
    os.mkfifo(tmp / "x.py")
    out = torchlint(["check", "--no-cache", "x.py", "ok.py"], tmp, timeout=20)
    return first(sound(out), sibling_reported(out), None if b"x.py" in out.stdout else "the FIFO was skipped silently")


@case("special files", "a socket named explicitly")
def _socket_explicit(tmp: Path) -> Optional[str]:
    ok_file(tmp)
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp / "s.py"))
        out = torchlint(["check", "--no-cache", "s.py", "ok.py"], tmp, timeout=20)
    finally:
        sock.close()
    return first(sound(out), sibling_reported(out), None if b"s.py" in out.stdout else "the socket was skipped silently")


@case("special files", "x.py -> /dev/zero")
def _dev_zero(tmp: Path) -> Optional[str]:
    ok_file(tmp)
    os.symlink("/dev/zero", tmp / "x.py")
    out = torchlint(["check", "--no-cache", "."], tmp, timeout=20)
    return first(sound(out), sibling_reported(out))


@case("special files", "a 5 MB generated file: 10 s, or a TL000 naming the limit")
def _huge(tmp: Path) -> Optional[str]:
    ok_file(tmp)
    body = "".join(f"y{i} = torch.zeros({i}) + x * {i}\n" for i in range(130_000))
    write(tmp, "huge.py", with_finding(body))
    out = torchlint(["check", "--no-cache", "."], tmp, timeout=30)
    limited = b"huge.py" in out.stdout and b"max-file-size" in out.stdout
    return first(sound(out), sibling_reported(out),
                 None if limited or out.seconds <= 10 else f"took {out.seconds:.1f} s and named no limit")


# Line endings and encodings: everything but the fixed line must come back byte for byte.
def _roundtrip_case(prefix: bytes, eol: bytes, suffix: bytes = b"", encoding: str = "utf-8") -> Case:
    def run(tmp: Path) -> Optional[str]:
        def src(line: str) -> bytes:
            body = ["import torch", "", "", "def build(model):", "    x = 1", "    " + line, "    return opt"]
            return prefix + eol.join(s.encode(encoding) for s in body) + eol + suffix
        path = write(tmp, "f.py", src(FINDING))
        out = torchlint(["fix", "--apply", "--no-cache", "f.py"], tmp)
        got = path.read_bytes()
        return first(sound(out), None if got == src(FIXED) else f"bytes changed: {got[-60:]!r}")
    return run


for _label, _args in {
    "LF": (b"", b"\n"), "CRLF": (b"", b"\r\n"), "CR only": (b"", b"\r"), "BOM": (b"\xef\xbb\xbf", b"\n"),
    "latin-1 cookie": (b"# -*- coding: latin-1 -*-\n# caf\xe9\n", b"\n", b"", "latin-1"),
    "no final newline": (b"", b"\n", b"x = 2"),
}.items():
    case("line endings, encodings", _label, fast=_label == "CR only")(_roundtrip_case(*_args))


@case("line endings, encodings", "form feed in an untouched function")
def _form_feed(tmp: Path) -> Optional[str]:
    untouched = b"def other():\n    a = 1\n\x0c    b = 2\n    c = 3\n    return a\n\n\n"
    original = with_finding("").encode() + b"\n\n" + untouched
    path = write(tmp, "f.py", original)
    out = torchlint(["fix", "--apply", "--no-cache", "f.py"], tmp)
    expected = original.replace(FINDING.encode(), FIXED.encode())
    return first(sound(out), None if path.read_bytes() == expected else "bytes outside the fix changed")


def _stdin_case(data: bytes, expected: Optional[bytes] = None) -> Case:
    """``fix - --apply`` (what editors call): stdout is the new buffer, byte for byte."""
    def run(tmp: Path) -> Optional[str]:
        out = torchlint(["fix", "-", "--apply", "--no-cache"], tmp, stdin=data)
        want = data if expected is None else expected
        if out.returncode is None or (out.returncode or 0) < 0:
            return sound(out)
        return None if out.stdout == want else f"stdout is not the buffer: {out.stdout[:60]!r} (exit {out.returncode})"
    return run


case("stdin", "undecodable bytes", fast=True)(_stdin_case(with_finding("s = '\xff'").encode("latin-1")))
case("stdin", "BOM")(_stdin_case(b"\xef\xbb\xbf" + with_finding("").encode(),
                                 b"\xef\xbb\xbf" + with_finding("").replace(FINDING, FIXED).encode()))
case("stdin", "latin-1 with its cookie")(_stdin_case(
    ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + with_finding("")).encode("latin-1"),
    ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + with_finding("").replace(FINDING, FIXED)).encode("latin-1")))
case("stdin", "a syntax error")(_stdin_case(with_finding("x = (").encode()))


# Files that change under the fixer: an in-process run whose fixer renames or deletes the file first.
_VANISH = """
import os, sys
import torchlint.run.runner as runner
real = runner.process_source
done = []
def sabotage(source, shown, path, job, project=None):
    result = real(source, shown, path, job, project)
    if not done:  # once: between the fixer's read and its write
        done.append(1)
        {action}
    return result
runner.process_source = sabotage
from torchlint.cli import main
main(["fix", "--apply", "--no-cache", "--jobs", "1", "f.py"])
"""


def _vanish_case(action: str, check: Callable[[Path], Optional[str]]) -> Case:
    def run(tmp: Path) -> Optional[str]:
        write(tmp, "f.py", with_finding(""))
        proc = subprocess.run([sys.executable, "-c", _VANISH.format(action=action)], cwd=tmp,
                              capture_output=True, timeout=TIMEOUT)
        out = Outcome(proc.returncode, proc.stdout, proc.stderr, 0.0)
        return first(sound(out) if b"Traceback" in proc.stderr else None, check(tmp))
    return run


case("vanishing files", "deleted during fix --apply")(_vanish_case(
    "os.unlink('f.py')", lambda tmp: "the deleted file was re-created" if (tmp / "f.py").exists() else None))
case("vanishing files", "renamed during fix --apply")(_vanish_case(
    "os.rename('f.py', 'g.py')", lambda tmp: "the renamed file came back as a copy" if (tmp / "f.py").exists() else None))
case("vanishing files", "replaced during fix --apply")(_vanish_case(
    "open('f.py', 'w').write('x = 1\\n')",
    lambda tmp: None if (tmp / "f.py").read_text() == "x = 1\n" else "another program's new content was overwritten"))


@case("permissions", "read-only file (0444)")
def _read_only(tmp: Path) -> Optional[str]:
    path = write(tmp, "f.py", with_finding(""), mode=0o444)
    out = torchlint(["fix", "--apply", "--no-cache", "f.py"], tmp)
    if path.read_text() != with_finding(""):
        return "a read-only file was rewritten"
    if stat.S_IMODE(path.stat().st_mode) != 0o444:
        return "its mode changed"
    return first(None if b"Fixed 0" in out.stdout or b"Fixed 1" not in out.stdout else "an unwritten fix was counted")


@case("permissions", "hard-linked file")
def _hard_link(tmp: Path) -> Optional[str]:
    path = write(tmp, "f.py", with_finding(""))
    os.link(path, tmp / "g.py.bak")
    torchlint(["fix", "--apply", "--no-cache", "f.py"], tmp)
    return None if path.stat().st_ino == (tmp / "g.py.bak").stat().st_ino else "the hard link was split"


@case("permissions", "owner and group kept")
def _owner(tmp: Path) -> Optional[str]:
    if os.geteuid() != 0:
        return None  # only root can give a file to someone else: nothing to try
    path = write(tmp, "f.py", with_finding(""))
    os.chown(path, 65534, 65534)
    torchlint(["fix", "--apply", "--no-cache", "f.py"], tmp)
    st = path.stat()
    return None if (st.st_uid, st.st_gid) == (65534, 65534) else f"owner became {st.st_uid}:{st.st_gid}"


@case("permissions", "read-only folder: nothing counted as fixed")
def _read_only_dir(tmp: Path) -> Optional[str]:
    folder = tmp / "ro"
    folder.mkdir()
    write(folder, "f.py", with_finding(""))
    folder.chmod(0o555)
    try:
        out = torchlint(["fix", "--apply", "--no-cache", "ro/f.py"], tmp)
    finally:
        folder.chmod(0o755)
    if os.geteuid() == 0:  # root writes anyway: then it must really be fixed
        return None if (folder / "f.py").read_text() != with_finding("") or b"Fixed 0" in out.stdout else "counted, not written"
    if b"Fixed 1 problem" in out.stdout:
        return "an unwritten fix was counted as fixed"
    return None if b"TL501" in out.stdout else "the finding that remains was hidden"


@case("killed and concurrent runs", "SIGKILL of a --jobs 2 run leaves no worker")
def _orphans(tmp: Path) -> Optional[str]:
    for i in range(40):
        write(tmp, f"m{i}.py", with_finding("\n".join(f"z{j} = {j}" for j in range(2000))))
    proc = subprocess.Popen([sys.executable, "-m", "torchlint", "check", "--no-cache", "--jobs", "2", "."], cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    session = os.getsid(proc.pid)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not [p for p in _pids() if p != proc.pid and _sid(p) == session]:
        time.sleep(0.1)  # until the workers are up
    time.sleep(0.5)
    proc.kill()
    proc.wait()
    time.sleep(2.0)
    left = [pid for pid in _pids() if _sid(pid) == session]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return f"{len(left)} worker(s) still running" if left else None


def _pids() -> List[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _sid(pid: int) -> Optional[int]:
    try:
        return os.getsid(pid)
    except OSError:
        return None


@case("killed and concurrent runs", "SIGKILL during fix --apply: files whole, temp files cleaned")
def _kill_writes(tmp: Path) -> Optional[str]:
    originals = {}
    for i in range(30):
        originals[f"k{i}.py"] = with_finding("\n".join(f"z{j} = {j}" for j in range(300)))
        write(tmp, f"k{i}.py", originals[f"k{i}.py"])
    for delay in (0.8, 1.2, 1.6):
        proc = subprocess.Popen([sys.executable, "-m", "torchlint", "fix", "--apply", "--no-cache", "--jobs", "1", "."],
                                cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.kill()
        proc.wait()
    # A temp file left by a kill, aged: the next run must remove it.
    stale = write(tmp, ".k0.py.abcd1234.torchlint.tmp", "partial")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    torchlint(["fix", "--apply", "--no-cache", "."], tmp)
    for name, text in originals.items():
        got = (tmp / name).read_text()
        if got not in (text, text.replace(FINDING, FIXED)):
            return f"{name} is neither the original nor the fixed file"
    left = [p.name for p in tmp.iterdir() if p.name.endswith(".torchlint.tmp")]
    return f"stale temp files left: {left}" if left else None


@case("killed and concurrent runs", "two fix --apply runs at once")
def _concurrent(tmp: Path) -> Optional[str]:
    for i in range(20):
        write(tmp, f"c{i}.py", with_finding(""))
    procs = [subprocess.Popen([sys.executable, "-m", "torchlint", "fix", "--apply", "--jobs", "2", "."], cwd=tmp,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
    for proc in procs:
        proc.wait(timeout=TIMEOUT)
    bad = [i for i in range(20) if (tmp / f"c{i}.py").read_text() != with_finding("").replace(FINDING, FIXED)]
    return f"{len(bad)} files not fixed exactly once" if bad else None


# The cache: any damaged entry is a miss, never fatal, never "no findings".
def _cache_case(damage: Callable[[Path], None]) -> Case:
    def run(tmp: Path) -> Optional[str]:
        ok_file(tmp)
        cache = tmp / "cache"
        first_run = torchlint(["check", "--cache-dir", str(cache), "ok.py"], tmp)
        entries = [p for p in cache.rglob("*") if p.is_file() and p.parent.name != "cache" and not p.name.startswith(".")]
        if not entries:
            return "no cache entry was written"
        for entry in entries:
            damage(entry)
        second = torchlint(["check", "--cache-dir", str(cache), "ok.py"], tmp)
        fixed = torchlint(["fix", "--apply", "--cache-dir", str(cache), "ok.py"], tmp)
        leaked = [p for p in cache.rglob(".tmp-*")]
        return first(sound(second), None if second.stdout == first_run.stdout else "a damaged entry changed the result",
                     None if FIXED in (tmp / "ok.py").read_text() else "fix --apply skipped the file",
                     None if not leaked else f"{len(leaked)} temp files leaked", sound(fixed))
    return run


def _replace_with_dir(entry: Path) -> None:
    entry.unlink()
    entry.mkdir()


for _label, _damage in {
    "nested 100k deep": lambda e: e.write_text("[" * 100_000 + "]" * 100_000),
    "{}": lambda e: e.write_text("{}"),
    "[]": lambda e: e.write_text("[]"),
    "a flipped digit": lambda e: e.write_bytes(e.read_bytes().replace(b'"line": 5', b'"line": 6')
                                               .replace(b'"line":5', b'"line":6').replace(b"5", b"6", 1)),
    "truncated": lambda e: e.write_bytes(e.read_bytes()[: len(e.read_bytes()) // 2]),
    "a folder in its place": _replace_with_dir,
}.items():
    case("corrupted cache", _label)(_cache_case(_damage))


@case("optimizer", "runtime.AdamW with tensor betas matches torch bitwise")
def _adamw_tensor_betas(tmp: Path) -> Optional[str]:
    script = """
import torch
from torchlint.runtime import AdamW
torch.manual_seed(0)
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    a = [torch.randn(64, dtype=dtype, requires_grad=True) for _ in range(3)]
    b = [p.detach().clone().requires_grad_() for p in a]
    betas = (torch.tensor(0.9), torch.tensor(0.999))
    ours = AdamW(a, lr=1e-3, betas=betas, foreach=False)
    ref = torch.optim.AdamW(b, lr=1e-3, betas=betas, foreach=False)
    for _ in range(5):
        for p, q in zip(a, b):
            g = torch.randn_like(p)
            p.grad, q.grad = g.clone(), g.clone()
        ours.step(); ref.step()
    for p, q in zip(a, b):
        assert torch.equal(p, q), (dtype, (p.float() - q.float()).abs().max().item())
print("ok")
"""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None  # nothing to compare against
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=TIMEOUT)
    return None if proc.returncode == 0 else proc.stderr.decode(errors="replace").strip().splitlines()[-1][:150]


# --- issue 27 (helper inputs): odd inputs, generated modules, mutations, scaling, cache forgery ---------

def _odd_input_case(setup: Callable[[Path], None], expect: bytes = b"", args: Sequence[str] = ("check",)) -> Case:
    """One odd input beside ``ok.py``: the run goes on (exit 0/1), ok.py's finding is reported, and the odd
    input gets what ``expect`` names (a TL000 text) where it is given."""
    def run(tmp: Path) -> Optional[str]:
        (tmp / ".git").mkdir()
        ok_file(tmp)
        setup(tmp)
        out = torchlint([*args, "--no-cache", "."], tmp)
        fixed_ok = b"ok.py: fixed" in out.stdout
        return first(sound(out), None if fixed_ok else sibling_reported(out),
                     None if expect in out.stdout else f"no {expect.decode()!r} in the output")
    return run


def _notebook(source) -> str:
    import json

    cell = {"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": None}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def _extend_chain(tmp: Path, length: int = 500) -> None:
    for i in range(length):
        write(tmp, f"c{i}.toml", f'extend = "c{i + 1}.toml"\n')
    write(tmp, f"c{length}.toml", 'select = ["TL5"]\n')
    write(tmp, "torchlint.toml", 'extend = "c0.toml"\n')


for _label, _setup, _expect, _args in [
    ("gitignore line `!`", lambda t: write(t, ".gitignore", "!\n"), b"", ("check",)),
    ("gitignore line `\\`", lambda t: write(t, ".gitignore", "\\\n"), b"", ("check",)),
    ("gitignore line `[z-a]`", lambda t: write(t, ".gitignore", "[z-a]\n"), b"", ("check",)),
    *[(f"coding cookie {c}", (lambda c: lambda t: write(t, "c.py", f"# coding: {c}\nx = 1\n"))(c), b"c.py:1:1: TL000",
       ("check",)) for c in ("rot13", "hex", "base64", "zlib", "punycode", "undefined")],
    ("notebook JSON nested 50,000 deep", lambda t: write(t, "n.ipynb", "[" * 50_000 + "]" * 50_000),
     b"n.ipynb:1:1: TL000", ("check",)),
    ("notebook with numbers in source", lambda t: write(t, "n.ipynb", _notebook([1, 2])), b"n.ipynb:1:1: TL000",
     ("check",)),
    ("notebook with a lone \\ud800", lambda t: write(t, "n.ipynb", _notebook(with_finding('x = "\ud800"'))),
     b"n.ipynb:1:1: TL000", ("check",)),
    ("fix: a cell holding the magic placeholder text",
     lambda t: write(t, "n.ipynb", _notebook(with_finding("pass  # torchlint-magic 3"))), b"n.ipynb:1:1: TL000",
     ("fix", "--apply")),
    ("non-UTF-8 pyproject.toml, not ours", lambda t: write(t, "pyproject.toml", b'name = "\xff"\n'),
     b"", ("check",)),
    ("max-file-size = 10**26", lambda t: write(t, "torchlint.toml", "max-file-size = 99999999999999999999999999\n"),
     b"", ("check",)),
    ("an extend chain of 500 files", _extend_chain, b"", ("check",)),
]:
    case("odd inputs (issue 27 #7)", _label)(_odd_input_case(_setup, _expect, _args))


def _cpython_agrees(tmp: Path, sources: Sequence[str], label: str) -> Optional[str]:
    """Each source (with a TL501 line, so it reaches the parser) is checked and fixed: no internal error;
    TL000 exactly where CPython's compile() rejects the code (LibCST's own refusals are counted apart);
    a fix of valid code compiles, and fixing twice changes nothing."""
    import warnings

    names = []
    for index, body in enumerate(sources):
        names.append(f"m{index}.py")
        write(tmp, names[-1], with_finding(body))
    originals = {name: (tmp / name).read_text() for name in names}
    out = torchlint(["check", "--no-cache", "--jobs", "1", "."], tmp, timeout=600)
    if sound(out):
        return sound(out)
    flagged = {line.split(":")[0] for line in out.text.splitlines() if " TL000 " in line}
    libcst_refused = {line.split(":")[0] for line in out.text.splitlines() if "LibCST" in line and " TL000 " in line}
    disagree = []
    for name, text in originals.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                compile(text, name, "exec")
                valid = True
            except (SyntaxError, ValueError):
                valid = False
        if valid != (name not in flagged):
            disagree.append(name)
    fixed = torchlint(["fix", "--apply", "--unsafe-fixes", "--no-cache", "--jobs", "1", "."], tmp, timeout=600)
    if sound(fixed):
        return sound(fixed)
    after = {name: (tmp / name).read_text() for name in names}
    broken = []
    for name in names:
        if name in flagged:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(after[name], name, "exec")
        except (SyntaxError, ValueError):
            broken.append(name)
    again = torchlint(["fix", "--apply", "--unsafe-fixes", "--no-cache", "--jobs", "1", "."], tmp, timeout=600)
    moved = [name for name in names if (tmp / name).read_text() != after[name]]
    _STATS[label] = (len(names), len(disagree), len(libcst_refused), len(broken), len(moved))
    return first(sound(again),
                 f"{len(disagree)} of {len(names)} disagree with CPython (e.g. {disagree[0]}; "
                 f"{len(libcst_refused)} refused by LibCST)" if disagree else None,
                 f"fixes of {broken[:3]} do not compile" if broken else None,
                 f"a second fix changed {moved[:3]}" if moved else None)


_STATS: Dict[str, tuple] = {}  # label -> (files, disagree with CPython, LibCST refused, fix broke, 2nd fix moved)


def _generated_modules(count: int, seed: int) -> List[str]:
    """Modules from hypothesmith's grammar strategy (not a torchlint dependency: skipped without it)."""
    import hypothesis
    import hypothesmith
    from hypothesis import strategies as st

    found: List[str] = []

    @hypothesis.settings(max_examples=count, database=None, deadline=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.seed(seed)
    @hypothesis.given(st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node()))
    def collect(source: str) -> None:
        found.append(source)

    collect()
    return found


@case("generated modules (hypothesmith)", "300 modules: CPython agreement, fixes compile and are stable")
def _hypothesmith_case(tmp: Path) -> Optional[str]:
    try:
        sources = _generated_modules(300, 27)
    except ImportError:
        return None  # pip install hypothesmith to run it
    return _cpython_agrees(tmp, sources, "hypothesmith")


def _mutations(seed: int, count: int) -> List[str]:
    """Fixtures with one small edit each: a deleted or doubled line, a form feed or tab in an indentation,
    a backslash continuation, deeper brackets, a `# noqa` with a reason."""
    import random

    rng = random.Random(seed)
    root = Path(__file__).resolve().parents[1] / "fixtures"
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.glob("TL*/*.py"))]
    edits = [
        lambda lines, i: lines[:i] + lines[i + 1:],
        lambda lines, i: lines[:i] + [lines[i]] + lines[i:],
        lambda lines, i: lines[:i] + ["\x0c" + lines[i]] + lines[i + 1:],
        lambda lines, i: lines[:i] + [lines[i].replace("    ", "\t", 1)] + lines[i + 1:],
        lambda lines, i: lines[:i] + [lines[i].replace("    ", "  \x0c  ", 1)] + lines[i + 1:],
        lambda lines, i: lines[:i] + [lines[i] + "  # noqa: TL101 why"] + lines[i + 1:],
        lambda lines, i: lines[:i] + ["x = " + "(" * 201 + "1" + ")" * 201] + lines[i:],
        lambda lines, i: lines[:i] + [lines[i] + " \\", ""] + lines[i + 1:],
    ]
    out = []
    for _ in range(count):
        lines = rng.choice(texts).split("\n")
        index = rng.randrange(len(lines))
        out.append("\n".join(rng.choice(edits)(lines, index)))
    return out


@case("mutated fixtures", "400 mutations: CPython agreement, fixes compile and are stable")
def _mutation_case(tmp: Path) -> Optional[str]:
    return _cpython_agrees(tmp, _mutations(27, 400), "mutations")


# Scaling: time against N for each shape a rule walks, doubling N; worse than linear (a ratio above 2.6 per
# doubling, measured on the largest pair) or any run over 10 s fails.
_LOOP = ("import torch\n\ndef train(model, loader, opt):\n{before}    for x, y in loader:\n"
         "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n{body}")
SHAPES: Dict[str, Tuple[Callable[[int], str], Tuple[str, ...], Tuple[int, ...]]] = {
    "TL101 N `.item()` reads in one loop": (
        lambda n: _LOOP.format(before="", body="".join(f"        v{i} = loss.item()\n" for i in range(n))),
        ("check",), (100, 200, 400)),
    "TL101 N load-bearing reads": (
        lambda n: _LOOP.format(before="", body="".join(f"        if loss.item() > {i}:\n            break\n"
                                                      for i in range(n))), ("check",), (100, 200, 400)),
    "TL101 fix N `acc += loss.item()`": (
        lambda n: _LOOP.format(before="".join(f"    acc{i} = 0.0\n" for i in range(n)),
                               body="".join(f"        acc{i} += loss.item()\n" for i in range(n))),
        ("fix", "--unsafe-fixes"), (50, 100, 200)),
    "TL201 N `zero_grad(set_to_none=False)`": (
        lambda n: _LOOP.format(before="", body="        opt.zero_grad(set_to_none=False)\n" * n),
        ("check",), (400, 800, 1600)),
    "TL201 fix N `zero_grad`": (
        lambda n: _LOOP.format(before="", body="        opt.zero_grad(set_to_none=False)\n" * n),
        ("fix", "--unsafe-fixes"), (200, 400, 800)),
    "TL101 N-branch elif chain with `.item()`": (
        # (tested on an attribute, not the loop's target: `if x == 0:` could be a first step, which runs once)
        lambda n: _LOOP.format(before="", body="        if opt.mode == 0:\n            a = loss.item()\n" + "".join(
            f"        elif opt.mode == {i}:\n            a = loss.item()\n" for i in range(1, n))), ("check",), (200, 400, 800)),
    "TL202 N closures in one function": (
        lambda n: "import torch\n\ndef build(model):\n" + "".join(
            f"    def evaluate{i}(loader):\n        model.eval()\n        for x in loader:\n            out = model(x)\n"
            for i in range(n)) + "    return evaluate0\n", ("check",), (200, 400, 800)),
    # (at 16 copies a rule that walks every def once per loop still looked linear: TL103's bound-name test made
    # the 1.35 MB file check in 23-30 s, where 70-280 copies show it at once)
    "all rules: N copies of the examples' training script": (
        lambda n: _training_file(n), ("check",), (70, 140, 280)),
    # the dense file of the issue (280 copies: 676 KB), fixed: its loaders and helpers are bound N times over
    "fix: N copies of the training script (280: 676 KB)": (
        lambda n: _training_file(n), ("fix",), (70, 140, 280)),
    # and with the unsafe fixes, which take a pass more (TL502's `fused=True` follows TL501's fix)
    "fix --unsafe-fixes: N copies of the training script (560: 1.35 MB)": (
        lambda n: _training_file(n), ("fix", "--unsafe-fixes"), (140, 280, 560)),
}
SCALING: List[Tuple[str, List[Tuple[int, float]], Optional[str]]] = []  # (shape, [(N, seconds)], verdict)


def _training_file(copies: int) -> str:
    """The shipped training script, its names numbered per copy so each statement is unique, as in one long
    real training file."""
    import re

    text = (Path(__file__).resolve().parents[1] / "examples" / "train_classifier.py").read_text()
    head = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    parts = [head]
    for i in range(copies):
        body = re.sub(r"\b(main|train|evaluate|model|loader|optimizer|loss|Net|build_model|dataset)\b",
                      lambda m: f"{m.group(1)}_{i}", text)
        parts.append("\n".join(line for line in body.splitlines() if not line.startswith(("import ", "from "))))
    return "\n\n".join(parts) + "\n"


def _scaling_case(name: str) -> Case:
    make, args, sizes = SHAPES[name]

    def run(tmp: Path) -> Optional[str]:
        timings = []
        for n in sizes:
            write(tmp, "shape.py", make(n))
            runs = []
            for _ in range(3):  # the median of three: the machine is shared
                out = torchlint([*args, "--no-cache", "shape.py"], tmp, timeout=120)
                if sound(out):
                    SCALING.append((name, timings, sound(out)))
                    return sound(out)
                runs.append(out.seconds)
            timings.append((n, sorted(runs)[1]))
        ratio = timings[-1][1] / max(timings[-2][1], 1e-9)
        slowest = max(t for _, t in timings)
        verdict = first(f"worse than linear: x{ratio:.1f} from N={timings[-2][0]} to N={timings[-1][0]}"
                        if ratio > 2.6 else None, f"{slowest:.1f} s (over 10 s)" if slowest > 10 else None)
        SCALING.append((name, timings, verdict))
        return verdict
    return run


for _shape in SHAPES:
    case("scaling (issue 27 #6)", _shape)(_scaling_case(_shape))


def scaling_table() -> str:
    if not SCALING:
        return ""
    lines = ["| shape | N: median seconds of 3 | last doubling | verdict |", "| --- | --- | --- | --- |"]
    for name, timings, verdict in SCALING:
        series = ", ".join(f"{n}: {t:.2f}" for n, t in timings)
        ratio = f"x{timings[-1][1] / max(timings[-2][1], 1e-9):.2f}" if len(timings) > 1 else "-"
        lines.append(f"| {name} | {series} | {ratio} | {verdict or 'linear'} |")
    return "\n".join(lines)


def cpython_table() -> str:
    if not _STATS:
        return ""
    lines = ["| inputs | files | disagree with CPython | of which LibCST refused | fix does not compile | "
             "second fix changed |", "| --- | --- | --- | --- | --- | --- |"]
    for label, (files, disagree, refused, broken, moved) in _STATS.items():
        lines.append(f"| {label} | {files} | {disagree} | {refused} | {broken} | {moved} |")
    return "\n".join(lines)


def _forged_cache_case(forge: Callable[[str, bytes], bytes]) -> Case:
    """A cache entry forged to say "no findings" (as a committed .torchlint_cache could): never believed."""
    def run(tmp: Path) -> Optional[str]:
        ok_file(tmp)
        first_run = torchlint(["check", "ok.py"], tmp)
        entries = [p for p in (tmp / ".torchlint_cache").rglob("*") if p.is_file() and p.parent.name != ".torchlint_cache"
                   and not p.name.startswith(".") and p.name != "CACHEDIR.TAG"]
        if not entries:
            return "no cache entry was written"
        for entry in entries:
            entry.write_bytes(forge(entry.name, b"[]"))
        second = torchlint(["check", "ok.py"], tmp)
        torchlint(["fix", "--apply", "ok.py"], tmp)
        return first(sound(second), None if second.stdout == first_run.stdout else "a forged entry hid the finding",
                     None if FIXED in (tmp / "ok.py").read_text() else "fix --apply skipped the file")
    return run


def _unkeyed_entry(key: str, payload: bytes) -> bytes:
    import hashlib
    import json

    header = {"schema": 2, "key": key, "blake2b": hashlib.blake2b(payload, digest_size=20).hexdigest()}
    return json.dumps(header).encode() + b"\n" + payload


def _other_machines_entry(key: str, payload: bytes) -> bytes:
    import hashlib
    import hmac
    import json

    mac = hmac.new(os.urandom(32), key.encode() + b"\n" + payload, hashlib.sha256).hexdigest()
    return json.dumps({"schema": 3, "key": key, "hmac": mac}).encode() + b"\n" + payload


case("cache forgery (issue 27 #9)", "an unkeyed empty entry, as anyone can compute")(_forged_cache_case(_unkeyed_entry))
case("cache forgery (issue 27 #9)", "an entry signed on another machine")(_forged_cache_case(_other_machines_entry))


@case("cache forgery (issue 27 #9)", "a file name with a newline injects no line")
def _newline_name(tmp: Path) -> Optional[str]:
    write(tmp, "o\nk.py", with_finding(""))
    out = torchlint(["check", "--no-cache", "."], tmp)
    lines = out.stdout.decode(errors="replace").splitlines()
    return first(sound(out), None if any(line.startswith("o\\nk.py:") for line in lines) else "the name was not escaped",
                 "a line starts with the name's second half" if any(line.startswith("k.py") for line in lines) else None)
# --- notebooks, the editor server, links out of the tree, codecs, Python's lines (issue 27, items 1-5, 12) -

NOTEBOOK_CELL = ["model = torch.nn.Linear(4, 2)\n", FINDING + "\n"]
# a GPU notebook: TL501, whose finding every case carries, is silent in CPU programs
NOTEBOOK_HEADER = HEADER + 'torch.set_default_device("cuda" if torch.cuda.is_available() else "cpu")\n'


def notebook(*sources) -> str:
    import json

    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
             for src in (NOTEBOOK_HEADER, *sources)]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def cell_text(path: Path, index: int = 1) -> str:
    import json

    source = json.loads(path.read_bytes().decode("utf-8-sig"))["cells"][index]["source"]
    return "".join(source) if isinstance(source, list) else source


def _notebook_refused(prepare: Callable[[Path], None], what: str) -> Case:
    """A notebook that must not be written: left as it was, said so, nothing counted as fixed."""
    def run(tmp: Path) -> Optional[str]:
        path = write(tmp, "nb.ipynb", notebook(NOTEBOOK_CELL))
        before = path.read_bytes()
        prepare(path)
        out = torchlint(["fix", "--apply", "--no-cache", "nb.ipynb"], tmp)
        return first(sound(out), None if path.read_bytes() == before else f"a {what} notebook was rewritten",
                     None if b"TL000" in out.stdout else "no TL000 said why it was not written",
                     None if b"Fixed 0 problems in 0 files" in out.stdout else "an unwritten fix was counted",
                     None if b"TL501" in out.stdout else "its findings were hidden")
    return run


case("notebook writes", "read-only notebook (0444)", fast=True)(_notebook_refused(lambda p: p.chmod(0o444), "read-only"))
case("notebook writes", "hard-linked notebook")(_notebook_refused(lambda p: os.link(p, p.with_name("twin.ipynb")),
                                                                  "hard-linked"))

_NOTEBOOK_EDITED = """
import torchlint.run.notebook as nb
real = nb.fix_source
def fix_then_edit(*args, **kwargs):  # between the read and the write
    result = real(*args, **kwargs)
    text = open("nb.ipynb").read()
    open("nb.ipynb", "w").write(text.replace("Linear(4, 2)", "Linear(4, 3)"))
    return result
nb.fix_source = fix_then_edit
from torchlint.cli import main
main(["fix", "--apply", "--no-cache", "--jobs", "1", "nb.ipynb"])
"""


@case("notebook writes", "edited in Jupyter during fix --apply")
def _notebook_edited(tmp: Path) -> Optional[str]:
    path = write(tmp, "nb.ipynb", notebook(NOTEBOOK_CELL))
    subprocess.run([sys.executable, "-c", _NOTEBOOK_EDITED], cwd=tmp, capture_output=True, timeout=TIMEOUT)
    return None if "Linear(4, 3)" in cell_text(path) else "the user's edit was overwritten"


@case("notebook writes", "over max-file-size")
def _notebook_size(tmp: Path) -> Optional[str]:
    write(tmp, "nb.ipynb", notebook(NOTEBOOK_CELL))
    out = torchlint(["check", "--no-cache", "--max-file-size", "100", "nb.ipynb"], tmp)
    return first(sound(out), None if b"max-file-size" in out.stdout else "a notebook over the limit was checked")


def _notebook_kept(cell: str, name: str = "nb.ipynb", bom: bool = False) -> Case:
    """A safe fix in a cell changes its line and nothing else: odd characters, line ends, the BOM."""
    def run(tmp: Path) -> Optional[str]:
        data = notebook(cell).encode("utf-8")
        path = write(tmp, name, (b"\xef\xbb\xbf" if bom else b"") + data)
        out = torchlint(["fix", "--apply", "--no-cache", name], tmp)
        if bom and not path.read_bytes().startswith(b"\xef\xbb\xbf"):
            return "the BOM was dropped"
        return first(sound(out), None if cell_text(path) == cell.replace(FINDING, FIXED) else
                     f"the cell became {cell_text(path)[:80]!r}")
    return run


for _label, _cell in {
    "\\u2028 in a string": 'model = 1\ns = """a\u2028b"""\n' + FINDING + "\n",
    "\\x1c and \\x85 in a string": 'model = 1\ns = "a\x1cb\x85c"\n' + FINDING + "\n",
    "a form feed line above the fix": "model = 1\n\x0c\n" + FINDING + "\n",
    "CRLF line ends": "model = 1\r\n" + FINDING + "\r\nx = 2\r\n",
    "CR line ends": "model = 1\r" + FINDING + "\rx = 2\r",
}.items():
    case("notebook writes", f"fix keeps {_label}")(_notebook_kept(_cell))
case("notebook writes", "fix keeps the BOM")(_notebook_kept("model = 1\n" + FINDING + "\n", bom=True))


@case("notebook writes", "stdin keeps the BOM")
def _notebook_stdin_bom(tmp: Path) -> Optional[str]:
    data = b"\xef\xbb\xbf" + notebook("model = 1\n" + FINDING + "\n").encode()
    out = torchlint(["fix", "-", "--stdin-filename", "nb.ipynb", "--apply", "--no-cache"], tmp, stdin=data)
    return first(sound(out), None if out.stdout.startswith(b"\xef\xbb\xbf") and FIXED.encode() in out.stdout
                 else "the BOM was dropped")


@case("links out of the tree", "fix --apply on a link to a file outside", fast=True)
def _link_out(tmp: Path) -> Optional[str]:
    ok_file(tmp)
    outside = tmp / "outside"
    outside.mkdir()
    target = write(outside, "target.py", with_finding(""))
    (tmp / "project").mkdir()
    os.symlink(target, tmp / "project" / "link.py")
    os.symlink(tmp / "ok.py", tmp / "project" / "ok.py")
    out = torchlint(["fix", "--apply", "--no-cache", "."], tmp / "project")
    return first(sound(out), None if target.read_text() == with_finding("") else "the file outside was rewritten",
                 None if b"symbolic link" in out.stdout else "no TL000 said what was left alone")


def _cache_links(plant: Callable[[Path, Path], None]) -> Case:
    """``check`` with a cache folder holding links out of the tree: nothing is written there."""
    def run(tmp: Path) -> Optional[str]:
        project, outside = tmp / "project", tmp / "outside"
        project.mkdir()
        outside.mkdir()
        ok_file(project)
        plant(project / ".torchlint_cache", outside)
        out = torchlint(["check", "--jobs", "1", "."], project)
        written = sorted(p.name for p in outside.rglob("*"))
        return first(sound(out), sibling_reported(out), None if not written else f"wrote {written} outside the tree")
    return run


def _dangling_markers(cache: Path, outside: Path) -> None:
    cache.mkdir()
    os.symlink(outside / "planted_tag", cache / "CACHEDIR.TAG")
    os.symlink(outside / "planted_ignore", cache / ".gitignore")


def _linked_version_folder(cache: Path, outside: Path) -> None:
    from torchlint import __version__

    cache.mkdir()
    os.symlink(outside, cache / f"v{__version__}")


case("links out of the tree", "dangling links in .torchlint_cache/")(_cache_links(_dangling_markers))
case("links out of the tree", "a linked folder inside .torchlint_cache/")(_cache_links(_linked_version_folder))
case("links out of the tree", ".torchlint_cache itself a link")(_cache_links(lambda cache, outside: os.symlink(outside, cache)))


def _codec_case(codec: str, line: str) -> Case:
    def run(tmp: Path) -> Optional[str]:
        data = (f"# -*- coding: {codec} -*-\n{line}\n" + with_finding("")).encode("ascii")
        path = write(tmp, "odd.py", data)
        checked = torchlint(["check", "--no-cache", "odd.py"], tmp)
        out = torchlint(["fix", "--apply", "--no-cache", "odd.py"], tmp)
        return first(sound(checked), sound(out), None if b"TL501" in checked.stdout else "check lost the finding",
                     None if path.read_bytes() == data else "lines no fix touched were re-encoded",
                     None if codec.encode() in out.stdout else "no TL000 named the codec")
    return run


case("source codecs", "unicode_escape")(_codec_case("unicode_escape", 's = "caf\\u00e9"'))
case("source codecs", "raw_unicode_escape")(_codec_case("raw_unicode_escape", 's = "caf\\u00e9"'))
case("source codecs", "utf-7")(_codec_case("utf-7", 's = "caf+AOk-"'))


@case("python lines", "check --add-noqa after a form feed in a string")
def _noqa_form_feed(tmp: Path) -> Optional[str]:
    text = 's = "a\x0cb"\nt = """c\x0cd\n"""\n' + with_finding("")
    path = write(tmp, "f.py", text)
    out = torchlint(["check", "--add-noqa", "--no-cache", "f.py"], tmp)
    want = text.replace(FINDING, FINDING + "  # noqa: TL501")
    return first(sound(out), None if path.read_text() == want else "the noqa landed on another line")


class _Lsp:
    """A minimal editor: LSP messages over the server's stdio."""

    def __init__(self, command: Sequence[str], cwd: Path) -> None:
        import json
        import queue
        import threading

        self.json, self.process = json, subprocess.Popen(list(command), cwd=cwd, stdin=subprocess.PIPE,
                                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.messages: "queue.Queue[dict]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.request(1, "initialize", {"processId": None, "rootUri": cwd.as_uri(), "capabilities": {}})
        self.send({"method": "initialized", "params": {}})

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = 0
            for line in iter(stream.readline, b"\r\n"):
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.messages.put(self.json.loads(stream.read(length)))

    def send(self, message: dict) -> None:
        body = self.json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def request(self, id: int, method: str, params) -> dict:
        self.send({"id": id, "method": method, "params": params})
        return self.wait(lambda m: m.get("id") == id and "method" not in m)

    def wait(self, matches, timeout: float = 30.0) -> dict:
        while True:
            message = self.messages.get(timeout=timeout)
            if matches(message):
                return message

    def published(self, timeout: float = 30.0) -> dict:
        return self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics", timeout)["params"]

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def _lsp_insert(uri: str, version: int, line: int, text: str) -> dict:
    at = {"line": line, "character": 0}
    return {"method": "textDocument/didChange", "params": {"textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": at, "end": at}, "text": text}]}}


def _lsp_open(uri: str, text: str) -> dict:
    return {"method": "textDocument/didOpen",
            "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}}


def _server_case(odd: str) -> Case:
    """Insert a line below one holding ``odd``: "Fix all" must give the editor's text back, fixed."""
    def run(tmp: Path) -> Optional[str]:
        try:
            import pygls  # noqa: F401
        except ImportError:
            return None  # no server extra: nothing to try
        text = HEADER + odd + "\nmodel = 1\n" + FINDING + "\n"
        uri = (tmp / "f.py").as_uri()
        lsp = _Lsp([sys.executable, "-m", "torchlint", "server"], tmp)
        try:
            lsp.send(_lsp_open(uri, text))
            lsp.published()
            lsp.send(_lsp_insert(uri, 2, 2, "y = 3\n"))
            lsp.published()
            whole = {"start": {"line": 0, "character": 0}, "end": {"line": 9, "character": 0}}
            actions = lsp.request(2, "textDocument/codeAction", {"textDocument": {"uri": uri}, "range": whole,
                                  "context": {"diagnostics": [], "only": ["source.fixAll"]}})["result"]
        finally:
            lsp.close()
        want = (HEADER + odd + "\ny = 3\nmodel = 1\n" + FINDING + "\n").replace(FINDING, FIXED)
        got = actions[0]["edit"]["changes"][uri][0]["newText"] if actions else None
        return None if got == want else f"Fix all gave {got!r:.90}"
    return run


for _label, _odd in {"a form feed line": "\x0c", "\\u2028 in a string": 's = "a\u2028b"',
                     "\\x1e and \\x85 in a string": 's = "a\x1eb\x85c"'}.items():
    case("editor server", f"an edit below {_label}", fast=_label == "a form feed line")(_server_case(_odd))

_SLOW_SERVER = """
import os, sys, time
import torchlint.server as server
real = server.lint_source
def slow(text, *args, **kwargs):
    if "SLOW_DOCUMENT" in text:
        deadline = time.monotonic() + 60
        while not os.path.exists("release") and time.monotonic() < deadline:
            time.sleep(0.01)
    return real(text, *args, **kwargs)
server.lint_source = slow
server.main()
"""


@case("editor server", "five keystrokes on a slow file hold up no other document")
def _server_slow(tmp: Path) -> Optional[str]:
    try:
        import pygls  # noqa: F401
    except ImportError:
        return None
    write(tmp, "slow_server.py", _SLOW_SERVER)
    slow, fast = (tmp / "slow.py").as_uri(), (tmp / "fast.py").as_uri()
    lsp = _Lsp([sys.executable, "slow_server.py"], tmp)
    try:
        lsp.send(_lsp_open(slow, "# SLOW_DOCUMENT\n" + with_finding("")))
        for version in range(2, 7):
            lsp.send(_lsp_insert(slow, version, 0, "#"))
        lsp.send(_lsp_open(fast, with_finding("")))
        try:
            answered = lsp.published(timeout=20)["uri"]
        except Exception:
            answered = None
        (tmp / "release").write_text("")
        later = [lsp.published(timeout=30)]
        try:
            while True:
                later.append(lsp.published(timeout=2))
        except Exception:
            pass
    finally:
        lsp.close()
    slow_versions = [p.get("version") for p in later if p["uri"] == slow]
    return first(None if answered == fast else "the other document waited for the slow one",
                 None if slow_versions == [6] else f"the slow document was answered for versions {slow_versions}")


# --- driver --------------------------------------------------------------------------------------------

def run_cases(fast: bool = False, only: str = "") -> List[tuple]:
    """(category, name, failure reason or None) for each case."""
    results = []
    for category, name, func, is_fast in CASES:
        if (fast and not is_fast) or (only and only.lower() not in f"{category} {name}".lower()):
            continue
        with tempfile.TemporaryDirectory(prefix="torchlint-fuzz-") as folder:
            tmp = Path(folder)
            try:
                reason = func(tmp)
            except Exception as exc:  # the case itself broke: count it as a failure, say why
                reason = f"case error: {type(exc).__name__}: {exc}"
            finally:
                for path in tmp.rglob("*"):  # read-only folders would stop the cleanup
                    if path.is_dir() and not path.is_symlink():
                        path.chmod(0o755)
        results.append((category, name, reason))
    return results


def table(results: List[tuple]) -> str:
    categories: Dict[str, List[int]] = {}
    for category, _, reason in results:
        counts = categories.setdefault(category, [0, 0, 0])
        counts[0] += 1
        counts[1 if reason is None else 2] += 1
    lines = ["| category | tried | survived | failed |", "| --- | --- | --- | --- |"]
    for category, (tried, survived, failed) in categories.items():
        lines.append(f"| {category} | {tried} | {survived} | {failed} |")
    total = [sum(c[i] for c in categories.values()) for i in range(3)]
    lines.append(f"| **all** | {total[0]} | {total[1]} | {total[2]} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="only the subset the test suite runs")
    parser.add_argument("--only", default="", help="only cases whose category or name contains this text")
    args = parser.parse_args(argv)
    results = run_cases(args.fast, args.only)
    print(table(results))
    for extra in (scaling_table(), cpython_table()):
        if extra:
            print("\n" + extra)
    failures = [(c, n, r) for c, n, r in results if r is not None]
    if failures:
        print("\nfailed:")
        for category, name, reason in failures:
            print(f"- {category} / {name}: {reason}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
