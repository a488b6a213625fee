"""--torch-version takes any PEP 440 version; without a setting, the project's declared torch requirement
gives the target (its lowest allowed version), and the settings say where the version came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_cli import invoke, project, write  # noqa: F401 - the fixture is used by name
from torchlint.config import ConfigError, DEFAULT_TORCH_VERSION, parse_torch_version
from torchlint.config.tree import ConfigTree, forget_configuration_files
from torchlint.config.torch_requirement import Unsure, lowest_allowed, requirement_lines, torch_specifier


@pytest.mark.parametrize("text, expected", [
    ("2.4", (2, 4)), ("1.13", (1, 13)), ("2.4.0+cu121", (2, 4)), ("2.5.0rc1", (2, 5)), ("2", (2, 0)),
    ("v2.1.0", (2, 1)), ("1!2.3", (2, 3)), ("2.4.0.post1", (2, 4)), ("2.6.0.dev20240101+cpu", (2, 6)),
    ("2.1.0a0+git1234abc", (2, 1)), (" 2.4 ", (2, 4)), ("2.13.0+CPU", (2, 13)),
])
def test_any_pep440_version_is_accepted(text, expected):
    assert parse_torch_version(text) == expected


@pytest.mark.parametrize("text", ["", "x", "2.", ".4", "2.4.0+", ">=2.1", "2.4 rc", "latest"])
def test_not_a_version_is_refused_with_the_forms_allowed(text):
    with pytest.raises(ConfigError, match="2.4.0\\+cu121"):
        parse_torch_version(text)


@pytest.mark.parametrize("specifier, lowest", [
    (">=2.1,<3", (2, 1)), (">=2.1, <3", (2, 1)), ("==2.4.*", (2, 4)), ("==2.*", (2, 0)), ("~=2.2", (2, 2)),
    ("~=2.2.1", (2, 2)), ("==2.4.0+cu121", (2, 4)), ("===2.3.1", (2, 3)), (">2.1", (2, 1)),
    (">=1.13,!=2.0.0", (1, 13)), ("<3,>=2.2", (2, 2)), (">=2.0,>=2.3", (2, 3)), (">=2.1.0rc1", (2, 1)),
    ("<=2.1,>=2.1", (2, 1)), ("", None), ("<3", None), ("!=2.0.*", None),
])
def test_lowest_version_a_specifier_allows(specifier, lowest):
    assert lowest_allowed(specifier) == lowest


@pytest.mark.parametrize("specifier", [">=2.1,!=2.1.*", ">=2.4,<2.1", ">=2.1,<2.1.0", "latest", ">=2.x", "=2.1"])
def test_unsure_specifiers_are_refused_with_the_reason(specifier):
    with pytest.raises(Unsure):
        lowest_allowed(specifier)


@pytest.mark.parametrize("requirement, specifier", [
    ("torch>=2.1", ">=2.1"), ("torch", ""), ("Torch [cuda] >= 2.1 ; python_version >= '3.9'", ">= 2.1"),
    ("torch (>=2.1,<3)", ">=2.1,<3"), ("torchvision>=0.16", None), ("pytorch-lightning>=2", None),
    ("numpy", None),
])
def test_torch_requirement(requirement, specifier):
    assert torch_specifier(requirement) == specifier


def test_a_torch_url_is_unsure():
    with pytest.raises(Unsure, match="URL"):
        torch_specifier("torch @ https://download.pytorch.org/whl/cpu/torch-2.4.0-cp311-linux_x86_64.whl")


def test_requirements_files_skip_comments_options_and_join_continuations():
    text = ("# pinned\n--index-url https://download.pytorch.org/whl/cpu\n-r base.txt\n\nnumpy  # any\n"
            "torch>=2.2,\\\n    <3  # the CUDA 12 build\n")
    assert requirement_lines(text) == [(5, "numpy"), (6, "torch>=2.2,     <3")]


BARE_ZERO_GRAD = ("import torch\nmodel = torch.nn.Linear(2, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                  "for x in range(3):\n    opt.zero_grad()\n    model(torch.randn(1, 2)).sum().backward()\n"
                  "    opt.step()\n")


def settings_for(path: Path):
    forget_configuration_files()
    return ConfigTree(cwd=Path.cwd().resolve()).for_path(path)


def test_the_declared_requirement_sets_the_target(project):
    """TL201 reports a bare `zero_grad()` only before torch 2.0: a project declaring `torch>=1.13` gets the
    finding, one declaring `torch==2.4.*` (or nothing) does not."""
    write(project / "train.py", BARE_ZERO_GRAD)
    assert "TL201" not in invoke("check", "train.py").output
    write(project / "pyproject.toml", '[project]\nname = "p"\nversion = "1"\ndependencies = ["torch>=1.13,<3"]\n')
    assert "TL201" in invoke("check", "train.py").output
    settings = settings_for(project / "train.py")
    assert settings.torch_version == (1, 13)
    assert settings.torch_version_origin == (
        f"declared torch requirement: {project / 'pyproject.toml'} [project] dependencies: 'torch>=1.13,<3'")
    # --show-settings says where the version came from
    shown = invoke("check", "--show-settings", "train.py").output
    assert f'torch-version = "1.13"  # {settings.torch_version_origin}' in shown
    # a flag wins over the declaration, and says so
    assert "TL201" not in invoke("check", "--torch-version", "2.4.0+cu121", "train.py").output
    shown = invoke("check", "--show-settings", "--torch-version", "2.4.0+cu121", "train.py").output
    assert 'torch-version = "2.4"  # --torch-version' in shown
    shown = invoke("check", "--show-settings", "--config", 'torch-version = "2.5.0rc1"', "train.py").output
    assert 'torch-version = "2.5"  # --config \'torch-version = "2.5.0rc1"\': torch-version' in shown


def test_lowest_of_every_declaration_and_requirements_files(project):
    write(project / "pyproject.toml", '[project]\nname = "p"\nversion = "1"\ndependencies = ["torch>=2.2"]\n'
          '[project.optional-dependencies]\ncpu = ["torch==2.4.*"]\ntest = ["torch"]\n')
    write(project / "requirements-dev.txt", "numpy\ntorch~=2.1.0\n")
    sub = project / "src" / "pkg"
    write(sub / "m.py", "x = 1\n")
    settings = settings_for(sub / "m.py")
    assert settings.torch_version == (2, 1)
    assert settings.torch_version_origin.endswith(f"{project / 'requirements-dev.txt'}:2: 'torch~=2.1.0'")


@pytest.mark.parametrize("item, version", [
    ("  - pytorch==1.5.0\n", (1, 5)),
    ("  - pytorch=1.13=py3.9_cuda11.7_cudnn8_0\n", (1, 13)),  # conda's prefix match, with a build string
    ("  - pytorch::pytorch>=2.1,<3\n", (2, 1)),
    ("  - pip:\n    - torch==1.12.1\n", (1, 12)),
    ("  - numpy\n", None),  # no torch in it: the default stays
])
def test_a_conda_environment_file_declares_the_version(project, item, version):
    write(project / "environment.yml", "name: env\nchannels:\n  - pytorch\ndependencies:\n  - python=3.8\n" + item)
    write(project / "train.py", "x = 1\n")
    settings = settings_for(project / "train.py")
    if version is None:
        assert settings.torch_version == (2, 13) and "no torch requirement" in settings.torch_version_origin
    else:
        assert settings.torch_version == version
        assert settings.torch_version_origin.startswith(f"declared torch requirement: {project / 'environment.yml'}:")


def test_a_setting_in_the_configuration_wins_and_is_named(project):
    write(project / "pyproject.toml", '[project]\nname = "p"\nversion = "1"\ndependencies = ["torch>=1.13"]\n'
          '[tool.torchlint]\ntorch-version = "2.5.0rc1"\n')
    settings = settings_for(project / "pyproject.toml")
    assert settings.torch_version == (2, 5)
    assert settings.torch_version_origin == f"{project / 'pyproject.toml'}: torch-version"


@pytest.mark.parametrize("dependencies, reason", [
    ('["torch"]', "sets no lower bound"),
    ('["numpy"]', "no torch requirement in"),
    ('["torch @ https://example.com/torch-2.4.0.whl"]', "a URL names no version range"),
    ('["torch>=2.1,!=2.1.*,>=1.0"]', "cannot tell the lowest version"),
])
def test_unpinned_or_unsure_keeps_the_default_with_the_reason(project, dependencies, reason):
    write(project / "pyproject.toml", f'[project]\nname = "p"\nversion = "1"\ndependencies = {dependencies}\n')
    settings = settings_for(project / "pyproject.toml")
    assert settings.torch_version == DEFAULT_TORCH_VERSION
    assert settings.torch_version_origin.startswith("default 2.13 (") and reason in settings.torch_version_origin


def test_the_search_stops_at_the_repository_root(project):
    write(project / "requirements.txt", "torch>=1.13\n")
    (project / "repo" / ".git").mkdir(parents=True)
    write(project / "repo" / "train.py", BARE_ZERO_GRAD)
    settings = settings_for(project / "repo" / "train.py")
    assert settings.torch_version == DEFAULT_TORCH_VERSION and "no pyproject.toml" in settings.torch_version_origin


@pytest.mark.parametrize("data", [b'[project]\nname = "\xff"\n', b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n",
                                  b"[project\n"])
def test_a_pyproject_that_cannot_be_read_declares_nothing(project, data):
    (project / "pyproject.toml").write_bytes(data)
    settings = settings_for(project / "pyproject.toml")
    assert settings.torch_version == DEFAULT_TORCH_VERSION and "no torch requirement" in settings.torch_version_origin
