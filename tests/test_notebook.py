"""Jupyter notebooks: code cells checked and fixed as one program, findings by cell, faithful write-back."""

from __future__ import annotations

import json

from test_cli import _runner, invoke, project, write  # noqa: F401 - the fixture is used by name
from torchlint.cli import cli
from torchlint.run.notebook import NotebookProgram, is_ipython_line


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
    code(["%matplotlib inline\n", "import torch\n", "torch.backends.cuda.matmul.allow_tf32 = True\n", "!pip install tqdm"],
         count=1),
    code("%%bash\necho foreach=False\n"),
    code(["model = torch.nn.Linear(4, 2).cuda()\n",
          "opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"],
         outputs=[{"output_type": "stream", "name": "stdout", "text": ["ok\n"]}], count=2),
    code(["for step in range(10):\n",
          "    %time x = torch.randn(8, 4)\n",
          "    loss = model(x.cuda()).sum()\n",  # a GPU notebook (TL101 is silent in CPU programs)
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


def test_only_a_line_that_starts_a_logical_line_is_ipythons():
    """IPython reads `%`, `!` and `?` as its own only where a logical line starts: a continuation line that
    starts with the `%` operator, or a line of a triple-quoted string, is Python (d2l's
    `print('epoch %d'\\n      % epoch)` was taken for a magic and the notebook for a syntax error)."""
    cell = code(["import torch\n",
                 "print('epoch %d, loss %.4f'\n",
                 "      % (epoch, loss))\n",
                 "total = (a\n",
                 "         != b)\n",
                 "x = 7 \\\n",
                 "    % 2\n",
                 "doc = \"\"\"\n",
                 "!not a shell escape\n",
                 "\"\"\"\n",
                 "s = '(' # an open bracket only in a string and a comment: (\n",
                 "!echo a real one\n",
                 "%time f(x)\n"])
    program = NotebookProgram.parse(notebook(cell))
    assert program.magics == ["!echo a real one", "%time f(x)"]
    assert "      % (epoch, loss))\n" in program.text and "!not a shell escape\n" in program.text
    compile(program.text, "nb", "exec")


def test_a_continuation_line_with_the_modulo_operator_is_no_syntax_error(project):
    write(project / "nb.ipynb", notebook(
        code("import torch\nmodel = torch.nn.Linear(4, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"),
        code(["for epoch in range(3):\n",
              "    loss = model(torch.randn(8, 4).cuda()).sum()\n",
              "    loss.backward()\n",
              "    opt.step()\n",
              "    print('epoch %d, loss %.4f'\n",
              "          % (epoch, loss.item()))\n"])))
    out = invoke("check", "nb.ipynb").output
    assert "TL000" not in out, out
    assert "nb.ipynb:cell 2:6:" in out and "TL101" in out, out


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


def test_a_one_line_cell_is_code_and_keeps_every_later_position(project):
    # a cell of one line has no line ending: its code must not join the marker comment above it
    cells = (code(["import torch\n", "model = torch.nn.Linear(4, 2).cuda()"]),
             code("opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)"),
             code(["for step in range(10):\n", "    loss = model(torch.ones(8, 4, device='cuda')).sum()\n",
                   "    loss.backward()\n", "    opt.step()\n", "    total = loss.item()"]))
    target = write(project / "t.ipynb", notebook(*cells))
    lines = invoke("check", "--select", "TL101,TL501", "t.ipynb").output.splitlines()
    assert lines[0].startswith("t.ipynb:cell 2:1:51: TL501 [*] ")
    assert lines[1].startswith("t.ipynb:cell 3:5:13: TL101 ")
    assert "fixed 1 x TL501" in invoke("fix", "--apply", "--select", "TL501", "t.ipynb").output
    assert json.loads(target.read_text())["cells"][1]["source"] == "opt = torch.optim.SGD(model.parameters(), lr=0.1)"


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
    assert json.loads(text)["cells"][3]["source"][0] == "model = torch.nn.Linear(4, 2).cuda()\n"
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
        2: "%matplotlib inline\nimport torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n!pip install tqdm",
        4: "".join(CELLS[3]["source"]),
        5: "".join(CELLS[4]["source"]),
    }


def test_notebook_on_stdin(project):
    text = notebook(*CELLS)
    result = invoke("check", "-", "--stdin-filename", "train.ipynb", input=text)
    assert "train.ipynb:cell 4:2:51: TL501" in result.output
    fixed = invoke("fix", "-", "--stdin-filename", "train.ipynb", "--apply", input=text)
    assert json.loads(fixed.stdout)["cells"][3]["source"][1] == "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"


# --- writing: the guarantees of .py files (issue 27, items 2, 3 and 12) ---------------------------------
FIXABLE = notebook(code("import torch\n"),
                   code(["model = torch.nn.Linear(4, 2).cuda()\n",
                         "opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"]))
FIXED_LINE = "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"


def test_a_notebook_edited_while_fixing_keeps_the_edit(project, monkeypatch):
    import torchlint.run.notebook as nb

    target = write(project / "nb.ipynb", FIXABLE)
    edited = FIXABLE.replace("lr=0.1", "lr=0.5")
    real_fix = nb.fix_source

    def fix_then_edit(*args, **kwargs):
        result = real_fix(*args, **kwargs)
        target.write_text(edited)  # the user saves in Jupyter between torchlint's read and its write
        return result

    monkeypatch.setattr(nb, "fix_source", fix_then_edit)
    result = invoke("fix", "--apply", "nb.ipynb")
    assert target.read_text() == edited
    assert "nb.ipynb:1:1: TL000 the file changed while torchlint was fixing it" in result.output
    assert "Fixed 0 problems in 0 files." in result.output


def test_read_only_and_hard_linked_notebooks_are_refused_and_their_findings_shown(project):
    import os

    target = write(project / "nb.ipynb", FIXABLE)
    target.chmod(0o444)
    result = invoke("fix", "--apply", "nb.ipynb")
    assert target.read_text() == FIXABLE
    assert "nb.ipynb:1:1: TL000 the file is read-only; not written" in result.output
    assert "nb.ipynb:cell 2:2:" in result.output and "TL501" in result.output  # still there, and said so
    assert "fixed 1" not in result.output and "Fixed 0 problems in 0 files." in result.output
    target.chmod(0o644)
    os.link(target, project / "twin.ipynb")
    result = invoke("fix", "--apply", "nb.ipynb")
    assert target.read_text() == FIXABLE and "2 hard links" in result.output
    assert "Fixed 0 problems in 0 files." in result.output


def test_a_fixed_notebook_keeps_its_owner_and_mode(project):
    import os
    import stat

    import pytest

    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    target = write(project / "nb.ipynb", FIXABLE)
    os.chown(target, 65534, 65534)
    target.chmod(0o640)
    invoke("fix", "--apply", "nb.ipynb")
    st = target.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o640)
    assert FIXED_LINE in json.loads(target.read_text())["cells"][1]["source"]


def test_max_file_size_holds_a_notebooks_code_not_its_outputs(project):
    write(project / "nb.ipynb", FIXABLE)
    result = invoke("check", "--max-file-size", "100", "nb.ipynb")
    assert "nb.ipynb:1:1: TL000 the notebook's code is " in result.output
    assert "over the max-file-size limit of 100 bytes" in result.output and "TL501" not in result.output
    # saved outputs (a plot, as base64) many times the limit: the code under it is checked
    plot = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBORw0KGgo" * 4000}}
    cells = json.loads(FIXABLE)["cells"]
    cells[-1]["outputs"] = [plot]
    write(project / "nb.ipynb", notebook(*cells))
    size = (project / "nb.ipynb").stat().st_size
    assert size > 8 * 4096
    assert "TL501" in invoke("check", "--max-file-size", "4KiB", "nb.ipynb").output
    assert "TL501" in invoke("check", "--max-file-size", "4KiB", "--stdin-filename", "nb.ipynb", "-",
                             input=(project / "nb.ipynb").read_text()).output
    # beyond 16 times the limit the JSON is not read at all
    for args, text in ((["nb.ipynb"], None), (["--stdin-filename", "nb.ipynb", "-"], (project / "nb.ipynb").read_text())):
        result = invoke("check", "--max-file-size", "1KiB", *args, input=text)
        assert "TL000 notebook is " in result.output and "over 16 times the max-file-size limit of 1.0 KiB" in result.output
        assert "TL501" not in result.output


ODD = '"""a\u2028b\x1cc\x85d\x0ce"""'  # characters str.splitlines() ends a line at; Python does not


def test_a_fix_keeps_characters_that_only_str_splitlines_ends_lines_at(project):
    cell = ["model = torch.nn.Linear(4, 2).cuda()\n", f"doc = {ODD}\n",  # a GPU notebook (TL501 is silent on the CPU)
            "opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n", "x = 1\x0c\n", "y = 2\n"]
    target = write(project / "nb.ipynb", notebook(code("import torch\n"), code("".join(cell))))
    checked = invoke("check", "nb.ipynb").output
    assert "nb.ipynb:cell 2:3:51: TL501" in checked  # lines counted as Python counts them
    invoke("fix", "--apply", "nb.ipynb")
    cell[2] = FIXED_LINE
    assert json.loads(target.read_text())["cells"][1]["source"] == "".join(cell)


def test_a_fix_keeps_crlf_and_cr_line_ends_inside_the_changed_cell(project):
    for ending in ("\r\n", "\r"):
        lines = ["model = torch.nn.Linear(4, 2).cuda()",
                 "opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)", "for _ in range(2):", "    pass"]
        target = write(project / "nb.ipynb", notebook(code("import torch\n"), code(ending.join(lines) + ending)))
        invoke("fix", "--apply", "nb.ipynb")
        lines[1] = FIXED_LINE.rstrip("\n")
        assert json.loads(target.read_text())["cells"][1]["source"] == ending.join(lines) + ending, repr(ending)


def test_a_fix_keeps_the_notebooks_bom_in_a_file_and_on_stdin(project):
    bom = "\ufeff".encode("utf-8")
    target = project / "nb.ipynb"
    target.write_bytes(bom + FIXABLE.encode("utf-8"))
    invoke("fix", "--apply", "nb.ipynb")
    data = target.read_bytes()
    assert data.startswith(bom) and FIXED_LINE in json.loads(data[len(bom):])["cells"][1]["source"]
    piped = invoke("fix", "-", "--stdin-filename", "nb.ipynb", "--apply", input=bom + FIXABLE.encode("utf-8"))
    assert piped.stdout_bytes == data


# --- a cell that does not parse (issue 27, robustness): reported alone, the others checked and fixed ----------
SLOW_OPT = "opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)\n"
PY2_CELL = code(["%time x = 1\n",  # a magic in the cell set aside: the others' placeholders are still theirs
                 "print 'training'\n",  # Python 2
                 "criterion = ___\n",  # an exercise's blank
                 SLOW_OPT])  # a finding torchlint would fix, were the cell Python


def test_a_cell_that_does_not_parse_is_reported_alone_and_the_others_are_checked(project):
    first = code(["import torch\n", "model = torch.nn.Linear(4, 2).cuda()\n", SLOW_OPT])
    last = code(["!nvidia-smi\n", "for step in range(10):\n",
                 "    loss = model(torch.ones(8, 4, device='cuda')).sum()\n", "    loss.backward()\n",
                 "    opt.step()\n", "    total = loss.item()\n", "opt2 = " + SLOW_OPT])
    text = notebook(first, {"cell_type": "markdown", "metadata": {}, "source": ["# Train\n"]}, PY2_CELL, last)
    target = write(project / "nb.ipynb", text)
    lines = invoke("check", "--select", "TL101,TL501", "nb.ipynb").output.splitlines()
    assert lines[0].startswith("nb.ipynb:cell 1:3:51: TL501 [*] "), lines
    assert lines[1] == ("nb.ipynb:cell 3:2:1: TL000 syntax error: Missing parentheses in call to 'print'. "
                        "Did you mean print(...)?"), lines
    assert lines[2].startswith("nb.ipynb:cell 4:6:13: TL101 "), lines  # the loop of cell 4 uses cell 1's model
    assert lines[3].startswith("nb.ipynb:cell 4:7:58: TL501 [*] "), lines
    diff = invoke("fix", "--select", "TL501", "nb.ipynb").output
    assert "--- a/nb.ipynb:cell 1" in diff and "--- a/nb.ipynb:cell 4" in diff and "cell 3" not in diff, diff
    result = invoke("fix", "--apply", "--select", "TL501", "nb.ipynb")
    assert "fixed 2 x TL501" in result.output and "nb.ipynb:cell 3:2:1: TL000 syntax error" in result.output
    fixed_opt = SLOW_OPT.replace(", foreach=False)", ")")
    expected = notebook(code(first["source"][:2] + [fixed_opt]), json.loads(text)["cells"][1], PY2_CELL,
                        code(last["source"][:-1] + ["opt2 = " + fixed_opt]))
    assert target.read_text() == expected  # the cell set aside, its `foreach=False` included, byte for byte
    again = invoke("fix", "--apply", "--select", "TL501", "nb.ipynb")
    assert "Fixed 0 problems in 0 files." in again.output and target.read_text() == expected


def test_every_cell_failing_gives_one_syntax_error_each_and_no_change(project):
    text = notebook(code(["import torch\n", "print torch.__version__\n"]), code("x = (\n"),
                    code(["def f(:\n", "    torch.optim.SGD(p, foreach=False)\n"]))
    target = write(project / "nb.ipynb", text)
    errors = [line for line in invoke("check", "nb.ipynb").output.splitlines() if "TL000" in line]
    assert [line.split(": TL000")[0] for line in errors] == ["nb.ipynb:cell 1:2:1", "nb.ipynb:cell 2:1:5",
                                                             "nb.ipynb:cell 3:1:7"], errors
    assert "'(' was never closed" in errors[1]
    result = invoke("fix", "--apply", "nb.ipynb")
    assert result.output.count("TL000") == 3 and "Fixed 0 problems in 0 files." in result.output
    assert target.read_text() == text


def test_a_name_defined_only_in_a_cell_set_aside_is_unknown_to_the_others(project):
    """The model and optimizer come from a cell that does not parse: the loop using them is still read,
    and no rule trips over the names it cannot resolve."""
    text = notebook(code("import torch\n"),
                    code(["model = torch.nn.Linear(4, 2).cuda()\n", "opt = torch.optim.Adam(model.parameters())\n",
                          "print 'built', model\n"]),
                    code(["loader = torch.utils.data.DataLoader(range(8), batch_size=2)\n",
                          "for x in loader:\n", "    loss = model(x.cuda()).sum()\n", "    loss.backward()\n",
                          "    opt.step()\n", "    opt.zero_grad(set_to_none=False)\n"]))
    target = write(project / "nb.ipynb", text)
    for args in (["check", "--select", "ALL"], ["check", "--select", "ALL", "--output-format", "json"],
                 ["fix", "--unsafe-fixes", "--select", "ALL"]):
        out = invoke(*args, "nb.ipynb").output
        assert out.count("TL000") == (0 if args[0] == "fix" else 1) and "internal error" not in out and "crash" not in out.lower(), out
        assert ("+    opt.zero_grad()" if args[0] == "fix" else "TL201") in out, out  # the third cell is checked
    invoke("fix", "--apply", "--unsafe-fixes", "--select", "ALL", "nb.ipynb")
    cells = json.loads(target.read_text())["cells"]
    assert cells[1]["source"] == json.loads(text)["cells"][1]["source"]
    assert "    opt.zero_grad()\n" in cells[2]["source"]


def test_failing_cells_are_found_one_by_one_as_the_program_is_parsed():
    from torchlint.run.notebook import failing_cells

    program = NotebookProgram.parse(notebook(code("import torch\n"), PY2_CELL, code("await asyncio.sleep(0)\n"),
                                             code("%%bash\nthis is not python\n"), code(["x = 1\n", "  y = 2\n"])))
    failing = failing_cells(program)
    assert sorted(failing) == [2, 5]  # top-level await and a cell magic are no syntax errors
    assert (failing[2].line, failing[2].column) == (2, 1) and (failing[5].line, failing[5].column) == (2, 2)
    rest = program.without(failing)
    assert rest.cells == [1, 3] and rest.magics == [] and "print 'training'" not in rest.text
    assert failing_cells(rest) == {}


def test_a_future_import_opening_a_later_cell_is_no_syntax_error(project):
    # IPython compiles each cell alone, where `from __future__ import ...` may open any cell; in the cells'
    # joined program it stands as a placeholder, and a fix writes it back as it was
    cells = (*CELLS, code(["from __future__ import print_function\n", "import numpy as np\n",
                           "arr = np.ones(3)\n", "t = torch.tensor(arr)\n"]))
    write(project / "train.ipynb", notebook(*cells))
    result = invoke("check", "--select", "TL104", ".")
    assert "TL000" not in result.output and "TL104" in result.output, result.output
    invoke("fix", "--apply", "--unsafe-fixes", "--select", "TL104", ".")
    fixed = json.loads((project / "train.ipynb").read_text())["cells"][-1]["source"]
    assert fixed[0] == "from __future__ import print_function\n" and "from_numpy(arr)" in "".join(fixed)


PREDICT = code(["import torch\n",
                "model = torch.nn.Linear(4, 2).cuda()\n",
                "def predict_label(model, values):\n",
                "    model.eval()\n",
                "    return model(torch.tensor(values, device='cuda')).argmax().item()\n"])


def test_tl202_leaves_an_evaluation_def_a_notebook_calls_by_hand_alone(project):
    """A notebook's predict helper called once or twice in cells, in no loop, builds a graph a few times per
    run: no finding. Called in a loop, in a comprehension or handed on (``map``), it runs per item: reported."""
    by_hand = notebook(PREDICT, code("predict_label(model, [1.0, 2.0, 3.0, 4.0])\n"),
                       code("print(predict_label(model, [0.0, 0.0, 1.0, 1.0]))\n"))
    write(project / "by_hand.ipynb", by_hand)
    assert "TL202" not in invoke("check", "--select", "TL202", "by_hand.ipynb").output
    for name, cell in (("loop", "for row in rows:\n    predict_label(model, row)\n"),
                       ("comprehension", "labels = [predict_label(model, row) for row in rows]\n"),
                       ("handed", "labels = list(map(lambda r: r, rows)) + [predict_label]\n")):
        write(project / f"{name}.ipynb", notebook(PREDICT, code(cell)))
        assert "TL202" in invoke("check", "--select", "TL202", f"{name}.ipynb").output, name


HELPERS = """\
import torch
from torch.utils.data import DataLoader, Dataset


class Files(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.load(f"data/{{i}}.pt"), i % 10


def load_data(batch_size):
    return DataLoader(Files(), batch_size=batch_size, shuffle=True{extra})
"""


def test_a_notebook_follows_the_project_files_its_code_imports(project):
    """A tutorial notebook whose loader comes from a helper module beside it (`train_iter =
    helpers.load_data(256)`, d2l's shape): the loader rules read the factory's loader as they do for a .py file
    in that folder, report at the factory's call in the notebook, and a change to the helper is seen (the
    notebook's cached result is keyed by the helper too)."""
    cells = [code(["import torch\n", "import helpers\n", "train_iter = helpers.load_data(256)\n",
                   "net = torch.nn.Linear(64, 10).cuda()\n",
                   "opt = torch.optim.AdamW(net.parameters(), fused=True)\n"]),
             code(["for epoch in range(5):\n", "    for X, y in train_iter:\n",
                   "        loss = torch.nn.functional.cross_entropy(net(X.cuda()), y.cuda())\n",
                   "        opt.zero_grad()\n", "        loss.backward()\n", "        opt.step()\n"])]
    write(project / "train.ipynb", notebook(*cells))
    write(project / "helpers.py", HELPERS.format(extra=""))
    shown = lambda: [line.split(" this")[0] for line in _runner().invoke(cli, [  # noqa: E731 - with the cache
        "check", "--select", "TL401,TL402", "train.ipynb"]).output.splitlines() if ": TL4" in line]
    assert shown() == ["train.ipynb:cell 1:3:14: TL401", "train.ipynb:cell 1:3:14: TL402"]
    write(project / "helpers.py", HELPERS.format(extra=", num_workers=4, pin_memory=True"))
    assert shown() == []


STEP_CELLS = (
    code(["import torch\n", "model = torch.nn.Linear(4, 2).cuda()\n",
          "opt = torch.optim.Adam(model.parameters(), lr=1e-3)\n"]),
    code(["history = []\n",
          "def learn(x):\n",
          "    loss = model(x).sum()\n",
          "    opt.zero_grad()\n",
          "    loss.backward()\n",
          "    opt.step()\n",
          "    history.append(loss.detach().cpu())\n"]),
    code(["for step in range(1000):\n",
          "    learn(torch.randn(8, 4, device='cuda'))\n"]),
)


def test_findings_left_after_a_fix_that_adds_lines_stay_at_their_cells_lines(project):
    # TL702's fix adds a line to the first cell: what is left in later cells keeps its place, and a message
    # naming another line of the program names it in cell coordinates
    write(project / "train.ipynb", notebook(*STEP_CELLS))
    before = [line for line in invoke("check", "train.ipynb").output.splitlines() if "TL101" in line]
    assert len(before) == 1 and before[0].startswith("train.ipynb:cell 2:7:20: TL101 ")
    assert "the training loop at cell 3, line 1 reaches it" in before[0]
    fixed = invoke("fix", "--apply", "--unsafe-fixes", "train.ipynb")
    assert "fixed 1 x TL702" in fixed.output
    assert before[0] in fixed.output.splitlines()  # the finding left, as `check` gives it after the fix
    assert [line for line in invoke("check", "train.ipynb").output.splitlines() if "TL" in line] == before
