"""The project model: a loader built by a factory in one file of the checked project (`data.py`) and trained
on in another (`train.py`), followed when only the training file is checked, and its cached result re-checked
when the factory's file changes. The fixture harness checks one file at a time, so these cases are trees of
their own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

from torchlint.run import runner
from torchlint.config import Settings
from torchlint.facts.project import ProjectModel, imported_modules, resolve
from project_tree import write_tree

FACTORY = """\
from torch.utils.data import DataLoader


def build_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True{extra})
"""

TRAIN = """\
{imports}


def main(model, optimizer, dataset):
    loader = {call}(dataset, 32)
    for epoch in range(10):
        for images, labels in loader:
            loss = model(images.cuda(), labels.cuda())
            loss.backward()
            optimizer.step()
"""


def _settings(root: Path) -> Settings:
    return Settings(select=("TL401", "TL402", "TL403"), root=root, project_root=root)


def _check(root: Path, *names: str, cache: bool = False) -> List[str]:
    job = runner.Job(_settings(root), cache_dir=root / ".cache" if cache else None)
    results = runner.run([root / name for name in names], job)
    return [f"{Path(d.path).name}:{d.line} {d.code} {d.message.rsplit(' (', 1)[-1]}"
            for result in results for d in result.diagnostics]


def test_a_factory_in_another_file_is_followed_and_reported_once_at_its_call(tmp_path):
    write_tree(tmp_path, {"data.py": FACTORY.format(extra=""),
                     "train.py": TRAIN.format(imports="from data import build_loader", call="build_loader")})
    expected = ["train.py:5 TL401 the DataLoader is built in data.py:5)",
                "train.py:5 TL402 the DataLoader is built in data.py:5)"]
    assert _check(tmp_path, "train.py") == expected
    assert _check(tmp_path, "train.py", "data.py") == expected  # never also at the DataLoader(...) in data.py


def test_settings_the_factory_passes_silence_the_findings(tmp_path):
    write_tree(tmp_path, {"data.py": FACTORY.format(extra=", num_workers=8, pin_memory=True, persistent_workers=True"),
                     "train.py": TRAIN.format(imports="from data import build_loader", call="build_loader")})
    assert [line for line in _check(tmp_path, "train.py") if " TL4" in line] == []


def test_imports_spelled_every_way(tmp_path):
    layouts = {
        "module": {"data.py": FACTORY.format(extra=""),
                   "train.py": TRAIN.format(imports="import data", call="data.build_loader")},
        "relative": {"pkg/__init__.py": "", "pkg/data.py": FACTORY.format(extra=""),
                     "pkg/train.py": TRAIN.format(imports="from .data import build_loader", call="build_loader")},
        "src": {"src/pkg/__init__.py": "", "src/pkg/data.py": FACTORY.format(extra=""),
                "src/pkg/train.py": TRAIN.format(imports="from pkg.data import build_loader as make",
                                                 call="make")},
        "re-exported": {"pkg/__init__.py": "from .loaders import build_loader\n",
                        "pkg/loaders.py": FACTORY.format(extra=""),
                        "train.py": TRAIN.format(imports="from pkg import build_loader", call="build_loader")},
        "submodule": {"pkg/__init__.py": "", "pkg/data.py": FACTORY.format(extra=""),
                      "train.py": TRAIN.format(imports="from pkg import data", call="data.build_loader")},
    }
    for layout, files in layouts.items():
        root = tmp_path / layout
        write_tree(root, files)
        trainer = next(name for name in files if name.endswith("train.py"))
        found = _check(root, trainer)
        assert [line.split(" ")[1] for line in found] == ["TL401", "TL402"], (layout, found)


def test_only_files_of_the_project_are_read(tmp_path):
    project = tmp_path / "project"
    write_tree(tmp_path, {"data.py": FACTORY.format(extra="")})  # beside the project, not in it
    write_tree(project, {"train.py": TRAIN.format(imports="from data import build_loader", call="build_loader")})
    assert resolve("data", 0, project / "train.py", project) is None
    assert _check(project, "train.py") == []


def test_a_change_in_the_factory_file_rechecks_the_cached_training_file(tmp_path):
    write_tree(tmp_path, {"data.py": FACTORY.format(extra=""),
                     "train.py": TRAIN.format(imports="from data import build_loader", call="build_loader")})
    assert len(_check(tmp_path, "train.py", cache=True)) == 2
    (tmp_path / "data.py").write_text(FACTORY.format(extra=", num_workers=4, pin_memory=True"))
    assert [line.split(" ")[1] for line in _check(tmp_path, "train.py", cache=True)] == ["TL403"]
    # an edit that leaves the summary as it was keeps the training file's entry: same key
    job = runner.Job(_settings(tmp_path), cache_dir=tmp_path / ".cache")
    cache = runner.Cache(job.cache_dir)
    data = (tmp_path / "train.py").read_bytes()

    def key() -> str:
        return runner._cache_key(cache, data, tmp_path / "train.py", job,
                                 runner.project_of(tmp_path / "train.py", data, job, cache))

    before = key()
    (tmp_path / "data.py").write_text(FACTORY.format(extra=", num_workers=4, pin_memory=True") + "# a comment\n")
    os.utime(tmp_path / "data.py", ns=(1, 1))  # another size and time: not this process's memory of it
    assert key() == before


def test_the_summary_is_plain_data(tmp_path):
    write_tree(tmp_path, {"data.py": FACTORY.format(extra=", num_workers=0"), "train.py": "import data\n"})
    model = ProjectModel.for_file(tmp_path / "train.py", b"import data\n", tmp_path)
    assert model.summaries == {(tmp_path / "data.py"): {"factories": {"build_loader": {"tuple": False, "sites": [{
        "line": 5, "num_workers": 0, "pin_memory": "absent", "persistent_workers": "absent", "in_memory": False,
        "on_cuda": False, "gpu_samples": False, "default_collate": True}]}}}}


def test_imports_read_off_the_bytes():
    text = b"import os, pkg.data as d\nfrom . import data, model\nfrom ..utils.io import (\n    load,\n    save as s,\n)\n"
    assert imported_modules(text) == [("os", 0), ("pkg", 0), ("pkg.data", 0), ("data", 1), ("model", 1),
                                      ("utils.io", 2), ("utils.io.load", 2), ("utils.io.save", 2)]


def test_a_file_that_trains_nowhere_reads_no_other_file(tmp_path):
    write_tree(tmp_path, {"data.py": FACTORY.format(extra=""), "use.py": "from data import build_loader\n"})
    job = runner.Job(_settings(tmp_path))
    assert runner.project_of(tmp_path / "use.py", b"from data import build_loader\n", job, None).summaries == {}
    trains = b"from data import build_loader\nloss.backward()\n"
    assert list(runner.project_of(tmp_path / "use.py", trains, job, None).summaries) == [tmp_path / "data.py"]
    # TL101 follows steps into other files' classes (``STEP_RULES``); TL201 reads no other file
    no_project_rules = runner.Job(Settings(select=("TL201",), root=tmp_path, project_root=tmp_path))
    assert runner.project_of(tmp_path / "use.py", trains, no_project_rules, None).is_empty()


PASSING_FACTORY = """\
from torch.utils.data import DataLoader


def build_loader(dataset, batch_size, workers=2):
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers)
"""


def test_a_factory_that_passes_its_parameter_on_is_read_at_its_call(tmp_path):
    """`num_workers=workers` in the factory: the call here decides the count (a literal, an argparse option's
    default, or the parameter's default); the message names the condition for the factory's file."""
    cases = {
        "build_loader(dataset, 32, workers=4)": "4 workers at this call",
        "build_loader(dataset, 32, 6)": "6 workers at this call",
        "build_loader(dataset, 32)": "2 workers at this call",
        "build_loader(dataset, 32, workers=args.workers)": "`args.workers` is 3 by default",
    }
    for at, (call, why) in enumerate(cases.items()):
        root = tmp_path / str(at)
        train = TRAIN.format(imports="import argparse\nfrom data import build_loader", call="build_loader")
        train = train.replace("build_loader(dataset, 32)", call)
        train += ("\nparser = argparse.ArgumentParser()\nparser.add_argument('--workers', type=int, default=3)\n"
                  "main(None, None, None, parser.parse_args())\n")
        train = train.replace("def main(model, optimizer, dataset):", "def main(model, optimizer, dataset, args):")
        write_tree(root, {"data.py": PASSING_FACTORY, "train.py": train})
        found = [line for line in _check_messages(root, "train.py") if "TL403" in line]
        assert found == [f"TL403 this DataLoader starts its worker processes again for every epoch ({why}); "
                         "pass `persistent_workers=workers > 0` to keep them (the DataLoader is built in data.py:5)"
                         ], (call, found)


def test_a_factory_parameter_bound_to_zero_or_to_what_the_file_cannot_read_is_silent(tmp_path):
    for at, call in enumerate(["build_loader(dataset, 32, workers=0)", "build_loader(dataset, 32, workers=n)",
                               "build_loader(dataset, 32, *rest)"]):
        root = tmp_path / str(at)
        train = TRAIN.format(imports="from data import build_loader", call="build_loader")
        write_tree(root, {"data.py": PASSING_FACTORY, "train.py": train.replace("build_loader(dataset, 32)", call)})
        assert [line for line in _check_messages(root, "train.py") if "TL403" in line] == [], call


def _check_messages(root: Path, *names: str) -> List[str]:
    job = runner.Job(_settings(root), cache_dir=None)
    return [f"{d.code} {d.message}" for result in runner.run([root / name for name in names], job)
            for d in result.diagnostics]


def test_a_factory_whose_dataset_makes_samples_on_the_gpu_silences_tl401_and_tl402(tmp_path):
    """The factory's file answers for its dataset (the summary's ``gpu_samples``): its ``__getitem__`` moves
    each sample to the GPU, so neither workers nor pinning can be used at the factory's call here."""
    gpu = ("import torch\nfrom torch.utils.data import DataLoader\n\n\nclass Windows:\n"
           "    def __init__(self, data):\n        self.data = data\n\n"
           "    def __len__(self):\n        return len(self.data)\n\n"
           "    def __getitem__(self, i):\n        return self.data[i]{move}\n\n\n"
           "def build_loader(data, batch_size):\n    return DataLoader(Windows(data), batch_size=batch_size)\n")
    for move, expected in (("", ["TL401", "TL402"]), (".cuda()", [])):
        root = tmp_path / (move.strip(".()") or "cpu")
        write_tree(root, {"data.py": gpu.format(move=move),
                     "train.py": TRAIN.format(imports="from data import build_loader", call="build_loader")})
        assert [line.split(" ")[1] for line in _check(root, "train.py")] == expected, move


def test_a_file_is_parsed_once_for_its_summary_and_its_check(tmp_path, monkeypatch):
    """``run.guard`` keeps the last texts' trees and indexes: ``train.py``'s check reads ``data.py``'s summary
    (a parse and an index of ``data.py``), and ``data.py``'s own check, after it, takes that tree and index."""
    import ast

    from torchlint.run import guard

    write_tree(tmp_path, {"data.py": FACTORY.format(extra=""),
                     "train.py": TRAIN.format(imports="from data import build_loader", call="build_loader")})
    monkeypatch.setattr(guard, "_parsed", {})
    monkeypatch.setattr(guard, "_parsed_held", [0])
    parsed: List[str] = []
    real_parse = ast.parse

    def parse(source, *args, **kwargs):
        parsed.append(source)
        return real_parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)
    job = runner.Job(Settings(select=("TL401", "TL402", "TL403", "TL101"), root=tmp_path, project_root=tmp_path))
    results = runner.run([tmp_path / "train.py", tmp_path / "data.py"], job)
    assert sorted(parsed) == sorted((tmp_path / name).read_text() for name in ("data.py", "train.py"))
    assert len(results[0].diagnostics) == 2 and results[1].diagnostics == []


def test_a_kept_index_is_handed_out_without_another_uses_facts(monkeypatch):
    """A check gets the kept index with no facts of a previous use (they may hold another project model); a
    summary borrows it and gives a check under way its facts back."""
    from torchlint.run import guard

    monkeypatch.setattr(guard, "_parsed", {})
    monkeypatch.setattr(guard, "_parsed_held", [0])
    text = "import torch\nx = torch.zeros(3)\n"
    index = guard.stdlib_index(text)
    index.shared["step_facts"] = "a check's, with its project model"
    again = guard.stdlib_index(text)
    assert again is index and again.shared == {}
    index.shared["step_facts"] = "a check's"
    with guard.borrowed_index(text) as borrowed:
        assert borrowed is index and borrowed.shared == {}
        borrowed.shared["step_facts"] = "the summary's, of the file alone"
    assert index.shared == {"step_facts": "a check's"}
    assert guard.stdlib_index("def (:\n") is None and guard.stdlib_tree("def (:\n") is None


def test_a_parse_past_the_threads_limits_is_not_kept(monkeypatch):
    """A RecursionError depends on the stack of the thread that parsed (summaries are made on the main thread,
    checks on the deep stack's): the next ask parses again."""
    import ast

    from torchlint.run import guard

    monkeypatch.setattr(guard, "_parsed", {})
    monkeypatch.setattr(guard, "_parsed_held", [0])
    real_parse, calls = ast.parse, []

    def parse(source, *args, **kwargs):
        calls.append(source)
        if len(calls) == 1:
            raise RecursionError("maximum recursion depth exceeded")
        return real_parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)
    assert guard.stdlib_tree("x = 1\n") is None
    assert guard.stdlib_tree("x = 1\n") is not None
    assert guard.stdlib_tree("x = 1\n") is not None and len(calls) == 2


def test_the_kept_texts_are_bounded(monkeypatch):
    from torchlint.run import guard

    monkeypatch.setattr(guard, "_parsed", {})
    monkeypatch.setattr(guard, "_parsed_held", [0])
    monkeypatch.setattr(guard, "PARSED_CHARACTERS", 100)
    texts = [f"x{n} = {n}  # {'.' * 10}\n" for n in range(20)]
    for text in texts:
        guard.stdlib_tree(text)
    assert sum(map(len, guard._parsed)) == guard._parsed_held[0] <= 100
    assert list(guard._parsed)[-1] == texts[-1]
    large = "y = 1  #" + "." * 60 + "\n"  # over a quarter of the bound: kept alone
    assert guard.stdlib_tree(large) is not None
    assert list(guard._parsed) == [large]


def test_a_kept_index_keeps_only_what_its_walk_built(monkeypatch):
    from torchlint.run import guard

    monkeypatch.setattr(guard, "_parsed", {})
    monkeypatch.setattr(guard, "_parsed_held", [0])
    text = "def f(x):\n    return g(x)\n"
    index = guard.stdlib_index(text)
    built = dict(index.__dict__)
    call = index.calls[0].node
    assert index.function_of(call) is index.functions[0] and "_parents" in index.__dict__
    index.shared["facts"] = 1
    guard.forget_answers(index)
    assert index.__dict__.keys() == built.keys() and index.shared == {}
    assert index.function_of(call) is index.functions[0]  # answered again


def test_the_called_words_of_a_text_are_the_names_followed_by_a_paren():
    # `_builds_a_class_of` tests `name + b"("` on one set made per checked file: a tail of a longer word counts
    # (`MyEnv(` holds `Env(`), a word with a space or a dot after it does not
    from torchlint.facts import project

    data = "env = MyEnv(x)\nb = envs.Box (1)\nc = Wrap.make\n\u00e9Net(2)\nprint(f(y))\n".encode()
    called = project._called_words(data)
    for name in (b"MyEnv", b"Env", b"nv", b"v", b"Box", b"Wrap", b"make", b"Net", b"et", b"print", b"f", b"y",
                 b"envs", b"x", b"int"):
        assert (name in called) == (name + b"(" in data), name


def test_a_files_class_names_are_read_once_for_all_its_importers(tmp_path, monkeypatch):
    """Every checked file asks whether it builds a class of each file it imports (``_builds_a_class_of``): the
    imported file is read once for all of them while it is unchanged, and read again once it changes."""
    from torchlint.facts import project
    from torchlint.run import fileio

    envs = tmp_path / "envs.py"
    envs.write_text("class Env:\n    pass\n")
    monkeypatch.setattr(project, "_class_names", {}, raising=False)  # (a fresh memo)
    reads: List[Path] = []
    real_read = fileio.read_regular

    def read_regular(path, *args, **kwargs):
        reads.append(Path(path))
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(fileio, "read_regular", read_regular)
    limit = 1 << 20
    assert project._builds_a_class_of(envs, b"env = Env()\n", limit)
    assert project._builds_a_class_of(envs, b"env = envs.Env(seed=1)\n", limit)
    assert not project._builds_a_class_of(envs, b"import envs\n", limit)
    assert reads == [envs]
    envs.write_text("class Wrapper:\n    pass\n")  # another size: read again
    assert not project._builds_a_class_of(envs, b"env = Env()\n", limit)
    assert project._builds_a_class_of(envs, b"env = Wrapper()\n", limit)
    assert reads == [envs, envs]


# A loader one file builds (or has a factory of a third file build) and hands to a class or function of another,
# which trains on it: the site is the parameter that receives it, where the trainer's file is checked.
SOLVER = """\
import torch


class Solver:
    def __init__(self, config, train_loader, valid_loader=None):
        self.train_loader = train_loader
        self.config = config

    def train(self, model, optimizer):
        for epoch in range(10):
            for images, labels in self.train_loader:
                loss = model(images.to("cuda"), labels.to("cuda"))
                loss.backward()
                optimizer.step()
"""

HANDING_MAIN = """\
{imports}


def main(config, dataset):
    {build}
    solver = Solver(config, {passed})
    solver.train(None, None)
"""


def _handing(root: Path, build: str, imports: str = "from solver import Solver", passed: str = "loader",
             solver: str = SOLVER, **more: str) -> None:
    write_tree(root, {"solver.py": solver, "main.py": HANDING_MAIN.format(imports=imports, build=build,
                                                                         passed=passed), **more})


def _handed_check(root: Path, *names: str, select=("TL103", "TL401", "TL402", "TL403")) -> List[str]:
    job = runner.Job(Settings(select=select, root=root, project_root=root))
    return [f"{Path(d.path).name}:{d.line}:{d.column} {d.code} {d.message.rsplit(' (', 1)[-1]}"
            for result in runner.run([root / name for name in names], job) for d in result.diagnostics]


def test_a_loader_handed_to_a_class_of_another_file_is_reported_at_the_parameter_that_receives_it(tmp_path):
    _handing(tmp_path, "loader = build_loader(dataset, 32)",
             imports="from solver import Solver\nfrom data import build_loader", **{"data.py": FACTORY.format(extra="")})
    found = _handed_check(tmp_path, "solver.py")
    # TL103 stays silent: non_blocking gains nothing from an unpinned loader, which TL402 reports
    assert found == ["solver.py:5:32 TL401 the DataLoader is built in data.py:5 and handed to `Solver` in main.py:7)",
                     "solver.py:5:32 TL402 the DataLoader is built in data.py:5 and handed to `Solver` in main.py:7)"]
    # checked together, the files agree: main.py itself reports nothing of the loader it only hands on
    assert _handed_check(tmp_path, "main.py", "solver.py", "data.py") == found


def test_a_loader_built_in_the_handing_file_and_passed_by_keyword(tmp_path):
    _handing(tmp_path, "loader = DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True)",
             imports="from torch.utils.data import DataLoader\nfrom solver import Solver",
             passed="train_loader=loader")
    found = _handed_check(tmp_path, "solver.py")
    assert [line.split(" ")[1] for line in found] == ["TL403", "TL103", "TL103"]
    assert found[0] == "solver.py:5:32 TL403 the DataLoader is built in main.py:6 and handed to `Solver` in main.py:7)"
    # a real, pinned DataLoader: non_blocking=True is a safe fix (not "a loader only by its name")
    job = runner.Job(Settings(select=("TL103",), root=tmp_path, project_root=tmp_path))
    diagnostics = runner.run([tmp_path / "solver.py"], job)[0].diagnostics
    assert diagnostics and all(d.fix is not None and d.fix.value == "safe" for d in diagnostics)


def test_a_loader_from_a_factory_returning_a_tuple_is_handed_by_its_place(tmp_path):
    data = "from torch.utils.data import DataLoader\n\n\ndef build_loaders(a, b):\n" \
           "    return DataLoader(a, num_workers=2, pin_memory=True), DataLoader(b)\n"
    _handing(tmp_path, "loader, valid = build_loaders(dataset, dataset)", passed="loader, valid",
             imports="from solver import Solver\nfrom data import build_loaders", **{"data.py": data})
    found = _handed_check(tmp_path, "solver.py", select=("TL401", "TL402", "TL403"))
    assert found == ["solver.py:5:32 TL403 the DataLoader is built in data.py:5 and handed to `Solver` in main.py:7)"]


def test_a_parameter_the_receiver_rebinds_or_a_loader_it_never_trains_on_is_silent(tmp_path):
    rebinding = SOLVER.replace("        self.config = config\n",
                               "        self.config = config\n        train_loader = None\n")
    _handing(tmp_path, "loader = build_loader(dataset, 32)", solver=rebinding,
             imports="from solver import Solver\nfrom data import build_loader", **{"data.py": FACTORY.format(extra="")})
    assert [line for line in _handed_check(tmp_path, "solver.py") if " TL4" in line] == []
    _handing(tmp_path, "loader = build_loader(dataset, 32)", passed="None, loader",
             imports="from solver import Solver\nfrom data import build_loader", **{"data.py": FACTORY.format(extra="")})
    # handed as `valid_loader`, which no loop trains on
    assert [line for line in _handed_check(tmp_path, "solver.py") if " TL4" in line] == []


def test_a_loader_handed_to_a_function_of_another_file_and_the_cache_follows_the_handing_file(tmp_path):
    trainer = "import torch\n\n\ndef train(model, optimizer, loader):\n    for x, y in loader:\n" \
              "        model(x.cuda(), y.cuda()).backward()\n        optimizer.step()\n"
    main = "from torch.utils.data import DataLoader\nfrom trainer import train\n\n\n" \
           "def main(model, optimizer, dataset):\n    train(model, optimizer, DataLoader(dataset{extra}))\n"
    write_tree(tmp_path, {"trainer.py": trainer, "main.py": main.format(extra="")})
    job = runner.Job(Settings(select=("TL401", "TL402", "TL403"), root=tmp_path, project_root=tmp_path),
                     cache_dir=tmp_path / ".cache")
    shown = lambda: [f"{d.line}:{d.column} {d.code}" for d in runner.run([tmp_path / "trainer.py"], job)[0].diagnostics]  # noqa: E731
    assert shown() == ["4:29 TL401", "4:29 TL402"]
    (tmp_path / "main.py").write_text(main.format(extra=", num_workers=4, pin_memory=True, persistent_workers=True"))
    assert shown() == []  # the handing file changed: the trainer's cached result is not reused


def test_a_pinned_loader_built_twice_alike_and_handed_to_a_file_that_never_names_a_loader(tmp_path):
    """A detector's `train.py` builds its pinned loader again after unfreezing (same settings) and hands it,
    as `gen`, to `fit_one_epoch` of `utils_fit.py`, a file whose text names no loader: TL103 runs there (the
    project opens its gate) and reports the blocking copies; two builds with different settings say no one
    thing, and stay silent."""
    fit = "import torch\n\n\ndef fit_one_epoch(model, optimizer, gen, cuda):\n    for batch in gen:\n" \
          "        images = batch[0]\n        if cuda:\n            images = images.cuda(0)\n" \
          "        model(images).sum().backward()\n        optimizer.step()\n"
    main = ("from torch.utils.data import DataLoader\nfrom utils_fit import fit_one_epoch\n\n\n"
            "def main(model, optimizer, data, epochs, unfreeze):\n"
            "    gen = DataLoader(data, batch_size=8, num_workers=4, pin_memory=True)\n"
            "    for epoch in range(epochs):\n        if epoch == unfreeze:\n"
            "            gen = DataLoader(data, batch_size=4, num_workers=4, pin_memory={pin})\n"
            "        fit_one_epoch(model, optimizer, gen, True)\n")
    write_tree(tmp_path, {"utils_fit.py": fit, "train.py": main.format(pin="True")})
    job = runner.Job(Settings(select=("TL103",), root=tmp_path, project_root=tmp_path))
    found = [(d.line, d.code, d.fix.value if d.fix else None) for d in runner.run([tmp_path / "utils_fit.py"], job)[0].diagnostics]
    assert found == [(8, "TL103", "safe")]
    (tmp_path / "train.py").write_text(main.format(pin="False"))
    assert runner.run([tmp_path / "utils_fit.py"], job)[0].diagnostics == []
