"""Jupyter notebooks: code cells checked and fixed as one program, findings by cell, faithful write-back."""

from __future__ import annotations

import json

from test_cli import invoke, project, write  # noqa: F401 - the fixture is used by name
from torchlint.notebook import NotebookProgram, is_ipython_line


def code(source, outputs=None, count=None):
    return {"cell_type": "code", "execution_count": count, "metadata": {"tags": ["x"]},
            "outputs": outputs or [], "source": source}


def notebook(*cells):
    data = {"cells": list(cells),
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


CELLS = (
    {"cell_type": "markdown", "metadata": {}, "source": ["# Training – a notebook\n"]},
    code(["%matplotlib inline\n", "import torch\n", "!pip install tqdm"], count=1),
    code("%%bash\necho foreach=False\n"),
    code(["model = torch.nn.Linear(4, 2)\n",
          "opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"],
         outputs=[{"output_type": "stream", "name": "stdout", "text": ["ok\n"]}], count=2),
    code(["for step in range(10):\n",
          "    %time x = torch.randn(8, 4)\n",
          "    loss = model(x).sum()\n",
          "    loss.backward()\n",
          "    opt.step()\n",
          "    total = loss.item()\n",
          "files = !ls\n",
          "model?"]),
)


def test_magics_and_shell_escapes_are_recognised():
    for line in ("%time f()", "!pip install x", "  %timeit g()", "files = !ls", "x = %env HOME", "model?", "torch.nn??"):
        assert is_ipython_line(line), line
    for line in ("x = 1", "a != b", "y = a % b", "# why?", "print('?')", "s = 'x'"):
        assert not is_ipython_line(line), line


def test_check_reports_by_cell_across_cells(project):
    write(project / "train.ipynb", notebook(*CELLS))
    result = invoke("check", ".")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("train.ipynb:cell 4:2:51: TL501 [*] ")  # imports in cell 2, optimizer in cell 4
    assert lines[1].startswith("train.ipynb:cell 5:6:13: TL101 ")  # the loop uses the model of cell 4
    assert "Found 2 problems" in result.output


def test_json_gives_the_cell(project):
    write(project / "train.ipynb", notebook(*CELLS))
    items = json.loads(invoke("check", "--output-format", "json", "train.ipynb").output)
    first = items[0]
    assert (first["path"], first["cell"], first["line"], first["column"]) == ("train.ipynb", 4, 2, 51)
    edit = first["fix"]["edits"][0]
    assert edit["location"] == {"line": 2, "column": 49} and edit["content"] == ""


def test_fix_writes_only_the_changed_cell_and_keeps_the_rest(project):
    target = write(project / "train.ipynb", notebook(*CELLS))
    before = json.loads(target.read_text())
    diff = invoke("fix", "train.ipynb")
    assert diff.exit_code == 1
    assert "--- a/train.ipynb:cell 4" in diff.output
    assert "+opt = torch.optim.SGD(model.parameters(), lr=0.1)" in diff.output
    result = invoke("fix", "--apply", "train.ipynb")
    assert "fixed 1 x TL501" in result.output
    text = target.read_text()
    after = json.loads(text)
    assert after["cells"][3]["source"][1] == "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    after["cells"][3]["source"][1] = before["cells"][3]["source"][1]
    assert after == before  # outputs, metadata, magics, the cell magic: all as they were
    assert text == notebook(*CELLS).replace(", foreach=False)", ")")  # same key order, indentation, newline
    assert invoke("fix", "--apply", "train.ipynb").output.count("fixed") == 0  # fixing twice changes nothing


def test_unsafe_fix_that_reindents_keeps_magics(project):
    cells = (code("import torch\n"),
             code(["def train(model, opt, loader):\n",
                   "    for x, y in loader:\n",
                   "        %time loss = model(x).sum()\n",
                   "        opt.zero_grad(set_to_none=False)\n",
                   "        loss.backward()\n",
                   "        opt.step()\n"]))
    target = write(project / "nb.ipynb", notebook(*cells))
    invoke("fix", "--apply", "--unsafe-fixes", "nb.ipynb")
    source = json.loads(target.read_text())["cells"][1]["source"]
    assert source[2] == "        %time loss = model(x).sum()\n"
    assert source[3] == "        opt.zero_grad()\n"


def test_broken_notebooks_are_reported(project):
    write(project / "bad.ipynb", "{not json")
    write(project / "odd.ipynb", '{"cells": 3}')
    out = invoke("check", ".").output
    assert "bad.ipynb:1:1: TL000 not a valid notebook" in out
    assert "odd.ipynb:1:1: TL000 not a valid notebook: no list of cells" in out


def test_syntax_error_points_at_the_cell(project):
    write(project / "nb.ipynb", notebook(code("import torch\n"), code(["opt = torch.optim.SGD(p, foreach=False)\n", "def f(:\n"])))
    out = invoke("check", "nb.ipynb").output
    assert "nb.ipynb:cell 2:2:" in out and "TL000" in out


def test_unusual_json_layout_is_kept_byte_for_byte(project):
    """Hand-edited spacing, a compact cell, a string source and ASCII escapes: only the fixed line changes."""
    text = notebook(*CELLS).replace('\n "nbformat": 4', '\n "nbformat":   4').replace("–", "\\u2013")
    text = text.replace('"source": [\n    "model = torch.nn.Linear(4, 2)\\n",',
                        '"source":[ "model = torch.nn.Linear(4, 2)\\n",')
    assert json.loads(text)["cells"][3]["source"][0] == "model = torch.nn.Linear(4, 2)\n"
    target = write(project / "train.ipynb", text)
    result = invoke("fix", "--apply", "train.ipynb")
    assert "fixed 1 x TL501" in result.output, result.output
    after = target.read_text()
    assert after == text.replace(", foreach=False)", ")")
    one_string = json.loads(notebook(*CELLS))
    one_string["cells"][3]["source"] = "".join(one_string["cells"][3]["source"])
    target.write_text(json.dumps(one_string))  # one line, sources as strings
    invoke("fix", "--apply", "train.ipynb")
    assert target.read_text() == json.dumps(one_string).replace(", foreach=False)", ")")


def test_program_maps_lines_back():
    program = NotebookProgram.parse(notebook(*CELLS))
    assert program.cells == [2, 4, 5]
    assert "pass  # torchlint-magic 0" in program.text and "%%bash" not in program.text
    assert program.cell_sources(program.text) == {
        2: "%matplotlib inline\nimport torch\n!pip install tqdm",
        4: "".join(CELLS[3]["source"]),
        5: "".join(CELLS[4]["source"]),
    }


def test_notebook_on_stdin(project):
    text = notebook(*CELLS)
    result = invoke("check", "-", "--stdin-filename", "train.ipynb", input=text)
    assert "train.ipynb:cell 4:2:51: TL501" in result.output
    fixed = invoke("fix", "-", "--stdin-filename", "train.ipynb", "--apply", input=text)
    assert json.loads(fixed.stdout)["cells"][3]["source"][1] == "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
