"""A real pre-commit run: the hooks of this repository block a commit with findings in a .py and an .ipynb
file, and the commit passes once the fix hook has fixed them.

pre-commit installs the hook's environment from a snapshot of this working tree (tracked and untracked files),
so it takes tens of seconds (pip installs libcst, click and pathspec from the configured index). Skipped
where pre-commit or git is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_notebook import CELLS, notebook

REPO = Path(__file__).resolve().parent.parent
SLOW = "import torch\n\nmodel = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or subprocess.run([sys.executable, "-c", "import pre_commit"]).returncode != 0,
    reason="needs git and pre-commit (pip install pre-commit)",
)


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=check, capture_output=True, text=True)


def snapshot_of_this_tree(target: Path) -> str:
    """This working tree as committed in a fresh repository (pre-commit installs hooks from a commit)."""
    listed = git(REPO, "ls-files", "--cached", "--others", "--exclude-standard", "-z").stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    git(target, "init", "-q", ".")
    git(target, "add", "-A")
    git(target, "commit", "-qm", "snapshot")
    return git(target, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture(scope="module")
def hooks(tmp_path_factory):
    """(snapshot repository, its commit, a PRE_COMMIT_HOME shared by the tests: one environment install)."""
    root = tmp_path_factory.mktemp("hooks")
    hooks_repo = root / "torchlint"
    hooks_repo.mkdir()
    return hooks_repo, snapshot_of_this_tree(hooks_repo), root / "pre-commit-home"


def test_pre_commit_blocks_findings_in_py_and_ipynb_until_fixed(tmp_path, monkeypatch, hooks):
    hooks_repo, rev, home = hooks
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", ".")
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hooks_repo}\n    rev: {rev}\n    hooks:\n      - id: torchlint-fix\n      - id: torchlint\n"
    )
    (project / "train.py").write_text(SLOW)
    (project / "train.ipynb").write_text(notebook(*CELLS))
    # the notebook's TL101 (`loss.item()` in the loop) has no safe fix: silence it as a user would
    cells = list(CELLS)
    cells[4] = dict(cells[4], source=[line.replace("total = loss.item()\n", "total = loss.item()  # noqa: TL101\n")
                                      for line in cells[4]["source"]])
    # and, once TL501's fix has dropped `foreach=False`, TL502's advice to fuse SGD (an unsafe fix)
    cells[3] = dict(cells[3], source=[line.replace("foreach=False)\n", "foreach=False)  # noqa: TL502\n")
                                      for line in cells[3]["source"]])
    (project / "train.ipynb").write_text(notebook(*cells))

    monkeypatch.setenv("PRE_COMMIT_HOME", str(home))
    pre_commit = [sys.executable, "-m", "pre_commit"]
    subprocess.run([*pre_commit, "install"], cwd=project, check=True, capture_output=True)
    git(project, "add", "-A")
    blocked = git(project, "commit", "-qm", "slow code", check=False)
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0, output
    assert "train.py: fixed 1 x TL501" in output and "train.ipynb: fixed 1 x TL501" in output
    assert "files were modified by this hook" in output
    assert "foreach=False" not in (project / "train.py").read_text()
    assert "lr=0.1, foreach=False)" not in (project / "train.ipynb").read_text()

    git(project, "add", "-A")
    passed = git(project, "commit", "-qm", "fixed code", check=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert git(project, "log", "--oneline").stdout.count("\n") == 1


def test_pre_commit_check_hook_blocks_what_has_no_safe_fix(tmp_path, monkeypatch, hooks):
    hooks_repo, rev, home = hooks
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", ".")
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hooks_repo}\n    rev: {rev}\n    hooks:\n      - id: torchlint\n"
    )
    (project / "train.ipynb").write_text(notebook(*CELLS))
    (project / "train.py").write_text(SLOW)
    monkeypatch.setenv("PRE_COMMIT_HOME", str(home))
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=project, check=True, capture_output=True)
    git(project, "add", "-A")
    blocked = git(project, "commit", "-qm", "slow code", check=False)
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0
    assert "train.py:4:51: TL501" in output and "train.ipynb:cell 5:6:13: TL101" in output
    assert output.count("Found ") == 1  # one batch, one summary (require_serial)


def _readme_configuration(hooks_repo: Path, rev: str) -> str:
    """The README's recommended .pre-commit-config.yaml, pointed at the snapshot of this tree."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## pre-commit\n"):]
    start = section.index("```yaml\n") + len("```yaml\n")
    block = section[start:section.index("```\n", start)]
    block = block.replace("https://github.com/torchlint/torchlint", str(hooks_repo))
    return re.sub(r"rev: \S+", f"rev: {rev}", block)


def test_the_readme_configuration_prints_each_remaining_finding_once(tmp_path, monkeypatch, hooks):
    hooks_repo, rev, home = hooks
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", ".")
    (project / ".pre-commit-config.yaml").write_text(_readme_configuration(hooks_repo, rev))
    # TL501 has a safe fix; TL201's fix is unsafe, so it stays and must block the commit
    (project / "train.py").write_text(SLOW + "\n\ndef step(opt):\n    opt.zero_grad(set_to_none=False)\n")
    monkeypatch.setenv("PRE_COMMIT_HOME", str(home))
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=project, check=True, capture_output=True)
    git(project, "add", "-A")
    blocked = git(project, "commit", "-qm", "slow code", check=False)
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0, output
    assert "train.py: fixed 1 x TL501" in output
    assert output.count(": TL201 ") == 1, output  # one hook: the finding without a safe fix is listed once
    assert output.count("Found ") == 1
