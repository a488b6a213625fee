"""The bench harness (issue 5): every workload, small, on the CPU; results must match and the fixer must fire.

No timing assertions: the machine is shared and timing is the harness's output, not its contract.
"""

import json
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torchlint.config import ConfigError  # noqa: E402
from torchlint.registry import get_rule  # noqa: E402
from torchlint.runtime import harness  # noqa: E402

WORKLOADS = harness.discover()


def rule_available(code: str) -> bool:
    try:
        get_rule(code)
        return True
    except ConfigError:
        return False


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One ``torchlint bench --device cpu --size small`` over every workload (one timed run each)."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    code = harness.main(["--device", "cpu", "--size", "small", "--repeats", "1", "--warmup", "0",
                         "--json", str(out)])
    data = json.loads(out.read_text())
    return code, {row["workload"]: row for row in data["rows"]}, data


def test_every_rule_with_a_fix_ships_a_workload():
    codes = {w.code for w in WORKLOADS}
    assert {"TL101", "TL104", "TL201", "TL202", "TL301", "TL501"} <= codes


@pytest.mark.parametrize("workload", WORKLOADS, ids=[f"{w.code}-{w.name}" for w in WORKLOADS])
def test_workload_fixed_and_same_results(full_run, workload):
    if not harness._extra_spec(workload.text) and not rule_available(workload.code):
        pytest.skip(f"rule {workload.code} has not landed yet")
    _, rows, _ = full_run
    row = rows[workload.name]
    assert row["error"] == "", row["error"]
    assert row["changed"], "the fixer did not change the workload"
    assert row["fixes_applied"] >= 1
    assert row["match"] is True, row["mismatch"]
    assert row["verdict"] in ("faster", "same", "slower", harness.NEEDS_CUDA)
    assert row["max_abs_diff"] is not None
    assert row["kind"] == ("extra" if harness._extra_spec(workload.text) else "fix")
    assert row["diff"].count("\n+") >= 1


def test_full_run_json_and_exit_code(full_run):
    code, rows, data = full_run
    broken = [r["workload"] for r in rows.values() if r["verdict"] in ("error", "different results")
              and rule_available(r["rule"])]
    assert not broken
    if all(rule_available(w.code) for w in WORKLOADS):
        assert code == 0
    for key in ("device", "device_name", "size", "torch_version", "date", "noise_rule", "table"):
        assert key in data
    assert data["device"] == "cpu" and data["size"] == "small"


def test_tl202_reports_peak_memory(full_run):
    if not rule_available("TL202"):
        pytest.skip("rule TL202 has not landed yet")
    _, rows, _ = full_run
    row = rows["bench_validation"]
    assert row["memory_before_bytes"] is not None and row["memory_after_bytes"] is not None
    assert "peak" in row["memory_method"]


# --- failures must fail -------------------------------------------------------------------------

SMALL_WORKLOAD = '''
import torch

TOLERANCE = {"rtol": 0, "atol": 0}
SCALE = 1.0


def setup(device, size):
    torch.manual_seed(0)
    return torch.randn(8, device=device)


def run(x):
    return {"y": x * SCALE, "total": float(x.sum())}
'''


def write_workload(root: Path, code: str, name: str, text: str) -> Path:
    folder = root / code
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bench_{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def scale_fixer(code, text, path):
    return text.replace("SCALE = 1.0", "SCALE = 1.0001"), 1


def identity_fixer(code, text, path):
    return text, 0


def test_different_results_exit_non_zero(tmp_path):
    write_workload(tmp_path / "fx", "TL999", "fake", SMALL_WORKLOAD)
    out = tmp_path / "out.json"
    code = harness.main(["--device", "cpu", "--fixtures", str(tmp_path / "fx"), "--json", str(out)],
                        fixer=scale_fixer)
    assert code == 1
    (row,) = json.loads(out.read_text())["rows"]
    assert row["verdict"] == "different results"
    assert row["match"] is False and row["before"] is None  # nothing is timed after a mismatch
    assert row["max_abs_diff"] > 0 and "y" in row["mismatch"]


def test_rule_that_does_not_fire_is_an_error(tmp_path):
    write_workload(tmp_path / "fx", "TL999", "fake", SMALL_WORKLOAD)
    out = tmp_path / "out.json"
    code = harness.main(["--device", "cpu", "--fixtures", str(tmp_path / "fx"), "--json", str(out)],
                        fixer=identity_fixer)
    assert code == 1
    (row,) = json.loads(out.read_text())["rows"]
    assert row["verdict"] == "error" and not row["changed"]
    assert "did not fire" in row["error"]


@pytest.mark.skipif(not rule_available("TL201"), reason="rule TL201 has not landed yet")
def test_real_fixer_not_firing_is_an_error(tmp_path):
    # zero_grad() is already the fast form: TL201 has nothing to fix.
    write_workload(tmp_path / "fx", "TL201", "clean", SMALL_WORKLOAD.replace(
        "def run(x):", "def run(x):\n    opt = torch.optim.SGD([torch.nn.Parameter(x)], lr=0.1)\n    opt.zero_grad()"))
    rows = [harness.bench_workload(w, "cpu", "small", 1, 0) for w in harness.discover(tmp_path / "fx")]
    assert [r.verdict for r in rows] == ["error"]
    assert "did not fire" in rows[0].error


@pytest.mark.skipif(not rule_available("TL201"), reason="rule TL201 has not landed yet")
def test_real_unsafe_fix_that_changes_training_is_caught(tmp_path):
    """TL201's fix is unsafe for a parameter that gets no gradient: with zeros SGD still decays it, with None
    it is skipped. The harness must report that as different results, not time it."""
    write_workload(tmp_path / "fx", "TL201", "unused_param", '''
        import torch
        from torch import nn

        TOLERANCE = {"rtol": 0, "atol": 0}


        def setup(device, size):
            torch.manual_seed(0)
            used, unused = nn.Linear(4, 1).to(device), nn.Linear(4, 1).to(device)
            optimizer = torch.optim.SGD([*used.parameters(), *unused.parameters()], lr=0.1, weight_decay=0.1)
            optimizer.zero_grad(set_to_none=False)
            for p in unused.parameters():
                p.grad = torch.zeros_like(p)
            return used, unused, optimizer, torch.randn(3, 8, 4, device=device)


        def run(state):
            used, unused, optimizer, batches = state
            for x in batches:
                optimizer.zero_grad(set_to_none=False)
                used(x).pow(2).mean().backward()
                optimizer.step()
            return {"used": [p.detach() for p in used.parameters()],
                    "unused": [p.detach() for p in unused.parameters()]}
    ''')
    (row,) = [harness.bench_workload(w, "cpu", "small", 1, 0) for w in harness.discover(tmp_path / "fx")]
    assert row.changed and row.verdict == "different results", row.error
    assert row.mismatch.startswith("unused")
    assert harness.exit_code([row], require_faster=False) == 1


def test_broken_workload_is_an_error(tmp_path):
    write_workload(tmp_path / "fx", "TL999", "broken", SMALL_WORKLOAD.replace('{"y"', '{"y": 1 / 0, "z"'))
    (row,) = [harness.bench_workload(w, "cpu", "small", 1, 0, fixer=scale_fixer)
              for w in harness.discover(tmp_path / "fx")]
    assert row.verdict == "error" and "ZeroDivisionError" in row.error


# --- pieces -------------------------------------------------------------------------------------


def test_before_and_after_are_separate_modules():
    a = harness.load_module(SMALL_WORKLOAD, "<TL999 before>")
    b = harness.load_module(SMALL_WORKLOAD.replace("SCALE = 1.0", "SCALE = 2.0"), "<TL999 after>")
    assert a.SCALE == 1.0 and b.SCALE == 2.0 and a is not b


def test_compare_tolerances():
    exact = {"rtol": 0.0, "atol": 0.0}
    same, diff, _ = harness.compare({"a": torch.ones(3), "s": 1.0}, {"a": torch.ones(3), "s": torch.tensor(1.0)},
                                    exact)
    assert same and diff == 0.0  # a float and a 0-d tensor compare as numbers
    b = {"p": [torch.ones(2)], "loss": 1.0}
    a = {"p": [torch.ones(2)], "loss": 1.0 + 1e-7}
    assert not harness.compare(b, a, exact)[0]
    assert harness.compare(b, a, exact, {"loss": {"rtol": 1e-6, "atol": 0.0}})[0]
    assert not harness.compare({"a": torch.ones(2)}, {"b": torch.ones(2)}, exact)[0]
    assert not harness.compare({"a": torch.ones(2)}, {"a": torch.ones(3)}, exact)[0]


def test_verdict_noise_rule():
    t = harness.Timing.of
    assert harness.judge(t([1.0, 1.0, 1.0]), t([0.5, 0.5, 0.5])) == "faster"
    assert harness.judge(t([1.0, 1.0, 1.0]), t([1.5, 1.5, 1.5])) == "slower"
    assert harness.judge(t([1.0, 1.0, 1.0]), t([0.98, 0.98, 0.98])) == "same"  # within the 3% floor
    assert harness.judge(t([0.6, 1.0, 1.4, 1.0]), t([0.8, 0.8, 0.8, 0.8])) == "same"  # within the spread


def test_help_and_usage_errors(capsys, tmp_path):
    assert harness.main(["--help"]) == 0
    assert "interquartile" in capsys.readouterr().out
    assert harness.main(["--size", "huge"]) == 2
    assert harness.main(["--fixtures", str(tmp_path)]) == 2  # no workloads
    assert harness.main(["--plot", str(tmp_path / "x.svg")]) == 2
    if not torch.cuda.is_available():
        assert harness.main(["--device", "cuda"]) == 2


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    write_workload(tmp_path / "fx", "TL999", "fake", SMALL_WORKLOAD.replace("SCALE = 1.0", "SCALE = 1"))
    plot = tmp_path / "speedups.png"
    fixer = lambda code, text, path: (text.replace("SCALE = 1", "SCALE = 1.0"), 1)  # noqa: E731
    assert harness.main(["--device", "cpu", "--fixtures", str(tmp_path / "fx"), "--repeats", "2",
                         "--plot", str(plot)], fixer=fixer) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_forwards_to_harness(tmp_path):
    from click.testing import CliRunner

    from torchlint.cli import cli

    result = CliRunner().invoke(cli, ["bench", "--list", "--fixtures", str(Path(harness.FIXTURES))])
    assert result.exit_code == 0, result.output
    assert "TL201" in result.output and "bench_zero_grad.py" in result.output


def test_the_readme_and_the_help_say_that_fixtures_code_is_run(capsys):
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "`torchlint bench --fixtures DIR` runs the workloads of that folder instead, and running them means " \
           "executing their code" in readme
    assert harness.main(["--help"]) == 0
    assert "their code is executed" in " ".join(capsys.readouterr().out.split())
