"""--output-format: full, concise, json-lines, github, sarif, gitlab, junit; --output-file."""

from __future__ import annotations

import json
from xml.etree import ElementTree

from test_cli import SLOW, invoke, project, write  # noqa: F401 - the fixture is used by name
from torchlint.report.formats import format_github
from torchlint.registry import all_rules
from torchlint.rule import Diagnostic

TWICE = SLOW + "opt2 = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"


def test_concise_is_the_default_text(project):
    write(project / "train.py", SLOW)
    assert invoke("check", "--output-format", "concise", ".").output == invoke("check", ".").output
    assert invoke("check", "--output-format", "text", ".").output == invoke("check", ".").output


def test_full_underlines_the_finding_and_shows_the_fix(project):
    write(project / "train.py", SLOW)
    out = invoke("check", "--output-format", "full", ".").output
    assert "4 | opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n" in out
    assert "  | " + " " * 50 + "^" * 13 + " TL501\n" in out
    assert "= safe fix:\n" in out
    assert "    - opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n" in out
    assert "    + opt = torch.optim.SGD(model.parameters(), lr=0.1)\n" in out
    assert out.rstrip().endswith("Run `torchlint fix --apply` to fix them.")


def test_json_lines(project):
    write(project / "train.py", TWICE)
    lines = invoke("check", "--output-format", "json-lines", ".").output.splitlines()
    assert [json.loads(line)["line"] for line in lines] == [4, 5]
    assert json.loads(lines[0])["fix"]["edits"]


def test_github_workflow_commands_are_escaped():
    d = Diagnostic("TL101", "n", "100% of steps\nwait", "a,b:c.py", 3, 5, 3, 9)
    assert format_github([d]) == (
        "::error title=torchlint (TL101),file=a%2Cb%3Ac.py,line=3,col=5,endLine=3,endColumn=9"
        "::a,b:c.py:3:5: TL101 100%25 of steps%0Await\n"
    )


def test_sarif_shape(project):
    write(project / "sub dir" / "train.py", TWICE)
    result = invoke("check", "--output-format", "sarif", ".")
    assert result.exit_code == 1
    log = json.loads(result.output)
    assert log["version"] == "2.1.0" and "sarif-2.1.0" in log["$schema"]
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == ["TL000"] + [r.code for r in all_rules()]
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["help"]["text"] and rule["help"]["markdown"].startswith(f"# {rule['id']} ")
        assert rule["helpUri"].endswith(f"docs/rules/{rule['id']}.md")
    first, second = run["results"]
    assert first["ruleId"] == "TL501" and rules[first["ruleIndex"]]["id"] == "TL501"
    location = first["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "sub%20dir/train.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 4, "startColumn": 51, "endLine": 4, "endColumn": 64}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].startswith("file:///")
    assert first["fingerprints"]["torchlint/v1"] != second["fingerprints"]["torchlint/v1"]
    replacement = first["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert replacement["deletedRegion"]["startLine"] == 4 and replacement["insertedContent"] == {"text": ""}


def test_sarif_fingerprint_survives_moving_the_code(project):
    target = write(project / "train.py", SLOW)
    before = json.loads(invoke("check", "--output-format", "sarif", ".").output)["runs"][0]["results"][0]
    target.write_text("# a new first line\n" + SLOW)
    after = json.loads(invoke("check", "--output-format", "sarif", ".").output)["runs"][0]["results"][0]
    assert before["locations"] != after["locations"] and before["fingerprints"] == after["fingerprints"]


def test_gitlab_code_quality(project):
    write(project / "train.py", TWICE.replace("opt2", "opt"))  # two identical lines: fingerprints must differ
    issues = json.loads(invoke("check", "--output-format", "gitlab", ".").output)
    assert len(issues) == 2
    for issue in issues:
        assert {"description", "check_name", "fingerprint", "severity", "location"} <= set(issue)
        assert issue["severity"] in ("info", "minor", "major", "critical", "blocker")
        assert issue["location"]["path"] == "train.py" and issue["location"]["positions"]["begin"]["line"] in (4, 5)
    assert issues[0]["fingerprint"] != issues[1]["fingerprint"]


def test_junit(project):
    write(project / "train.py", TWICE)
    root = ElementTree.fromstring(invoke("check", "--output-format", "junit", ".").output)
    assert root.tag == "testsuites" and root.get("failures") == "2"
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["torchlint.TL501"] * 2
    assert cases[0].find("failure").text.startswith("line 4, col 51, ")
    write(project / "train.py", "x = 1\n")
    clean = ElementTree.fromstring(invoke("check", "--output-format", "junit", ".").output)
    assert clean.get("failures") == "0"
    # The root counts the test cases it holds: a clean run is one passing case, not `tests="0"`.
    assert clean.get("tests") == str(len(clean.findall("./testsuite/testcase"))) == "1"


def test_junit_notebook_lines_are_lines_of_the_file(project):
    """A CI view opens `train.ipynb` at `line=`: that must be the line of the JSON text holding the
    finding's source (cell 4, line 2 here), for sources kept as a list of lines and as one string."""
    from test_notebook import CELLS, code, notebook

    text = notebook(*CELLS, code("x = 1\nopt2 = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"))
    write(project / "train.ipynb", text)
    root = ElementTree.fromstring(invoke("check", "--output-format", "junit", ".").output)
    assert root.get("tests") == str(len(root.findall("./testsuite/testcase")))
    lines = text.splitlines()
    cases = {c.find("failure").text.split(",")[0]: c for c in root.findall("./testsuite/testcase")}
    listed = int(cases["cell 4"].get("line"))
    assert "opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)" in lines[listed - 1]
    assert cases["cell 4"].find("failure").text.startswith("cell 4, line 2, col 51, ")
    joined = int(cases[f"cell {len(CELLS) + 1}"].get("line"))
    assert "opt2 = torch.optim.SGD" in lines[joined - 1]


def test_output_file(project):
    write(project / "train.py", SLOW)
    result = invoke("check", "--output-format", "sarif", "--output-file", "report.sarif", ".")
    assert result.exit_code == 1 and result.output == ""
    assert json.loads((project / "report.sarif").read_text())["runs"][0]["results"]


def test_notebook_findings_in_machine_formats(project):
    from test_notebook import CELLS, notebook

    write(project / "train.ipynb", notebook(*CELLS))
    sarif = json.loads(invoke("check", "--output-format", "sarif", ".").output)["runs"][0]["results"][0]
    assert "region" not in sarif["locations"][0]["physicalLocation"] and sarif["properties"]["cell"] == 4
    github = invoke("check", "--output-format", "github", ".").output
    assert github.startswith("::error title=torchlint (TL501),file=train.ipynb::train.ipynb:cell 4:2:51: TL501")
    full = invoke("check", "--output-format", "full", ".").output
    assert "2 | opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)" in full
