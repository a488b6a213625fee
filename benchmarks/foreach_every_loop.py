"""Run TL501's loop rewrite on every ``for`` loop of a tree, not only the loops TL501 reports, and print each
loop's result: a hash of the rewritten code, ``nofix`` and the reason, or ``crash`` and the exception's type.

    python benchmarks/foreach_every_loop.py [--module torchlint.rules._foreach] PATH... > new.txt

Run it with two installs (``--module torchlint.rules._foreach_rewrite`` for one from before the split) and diff
the outputs: a change to the rewrite that must keep its behaviour shows no line of difference. Reasons are the
same in every run; files without ``torch`` and ``for `` or that LibCST cannot parse are skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import sys
from typing import Iterator, List

import libcst as cst

from torchlint.fix.analysis import FileAnalysis, walk


def _files(paths: List[str]) -> Iterator[str]:
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for root, dirs, names in os.walk(path):
            dirs.sort()
            yield from (os.path.join(root, name) for name in sorted(names) if name.endswith(".py"))


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", default="torchlint.rules._foreach", help="where rewrite_loop is")
    parser.add_argument("--torch-version", default="2.13")
    parser.add_argument("paths", nargs="+")
    options = parser.parse_args(argv)
    rewrite = importlib.import_module(options.module)
    version = tuple(int(part) for part in options.torch_version.split("."))
    for path in _files(options.paths):
        try:
            with open(path, encoding="utf-8") as handle:
                source = handle.read()
            if "torch" not in source or "for " not in source:
                continue
            module = cst.parse_module(source)
        except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
            continue
        analysis = FileAnalysis(module, source, path)
        for number, loop in enumerate(node for node in walk(module) if isinstance(node, cst.For)):
            ctx = rewrite.loop_context(analysis, loop, version)
            if ctx is None:
                break  # the file does not import torch
            try:
                code = cst.Module(body=rewrite.rewrite_loop(loop, ctx)).code
                result = "fix " + hashlib.sha1(code.encode()).hexdigest()[:16]
            except rewrite.NoFix as reason:
                result = f"nofix {reason}"
            except Exception as error:  # noqa: BLE001 - a crash is a result to compare
                result = f"crash {type(error).__name__}"
            print(f"{path} loop {number}\t{result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
