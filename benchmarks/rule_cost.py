"""What some rules add to a cold, serial check with every rule on, in process CPU seconds.

    python benchmarks/rule_cost.py --codes TL303,TL708 TREE [TREE ...]

For each tree, file by file as ``engine.lint_source`` does it: the text gates, ``ast.parse`` and the index of
every file past the text stage, every rule's ``detect``. It reports what the rules named by ``--codes`` add:
their own text gates and detects, and the parse and index of the files that only they let past the text stage.
Process CPU time, not wall time: on a shared machine it moves far less with the load than
``benchmarks/lint_speed.py``'s side-by-side runs, whose differences of a few percent it cannot resolve.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Dict, List

from torchlint.facts.index import index_of
from torchlint.config import Settings
from torchlint.engine import _stdlib_ast, rules_for_path
from torchlint.run.fileio import decode_source
from torchlint.registry import all_rules
from torchlint.rule import IndexContext, gate_passes, iter_reports


def _passes(rule, text: str, settings: Settings) -> bool:
    """The text stage as the registry runs it: the manifest's word gate, then the rule's patterns."""
    return gate_passes(rule.text_gate, text) and rule.may_fire(text, settings)


def measure(tree: Path, codes: set) -> Dict[str, float]:
    settings = Settings(root=tree, project_root=tree)
    rules = [rule() for rule in all_rules()]
    out = {name: 0.0 for name in ("files", "past the text stage", "past it for the rules", "only for the rules",
                                  "findings of the rules", "gates s", "gates of the rules s", "detect s",
                                  "detect of the rules s", "parse+index s", "parse+index only for the rules s")}
    clock = time.process_time
    for path in sorted(tree.rglob("*.py")):
        out["files"] += 1
        try:
            text = decode_source(path.read_bytes()).text
        except Exception:  # unreadable: the CLI reports it, nothing to time
            continue
        shown = os.path.relpath(path)
        kept = rules_for_path(rules, shown, settings)
        start = clock()
        others = [rule for rule in kept if rule.code not in codes and _passes(rule, text, settings)]
        middle = clock()
        ours = [rule for rule in kept if rule.code in codes and _passes(rule, text, settings)]
        out["gates s"] += middle - start
        out["gates of the rules s"] += clock() - middle
        if not others and not ours:
            continue
        out["past the text stage"] += 1
        out["past it for the rules"] += bool(ours)
        start = clock()
        parsed = _stdlib_ast(text)
        index = index_of(parsed, text) if parsed is not None else None
        spent = clock() - start
        out["parse+index s"] += spent
        if ours and not others:
            out["only for the rules"] += 1
            out["parse+index only for the rules s"] += spent
        if index is None:
            continue
        for group, key in ((others, "detect s"), (ours, "detect of the rules s")):
            start = clock()
            found: List = list(iter_reports(group, IndexContext(index, settings, shown), []))
            out[key] += clock() - start
            if group is ours:
                out["findings of the rules"] += len(found)
    return out


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codes", required=True, help="comma-separated rule codes (TL303,TL708)")
    parser.add_argument("trees", nargs="+", type=Path)
    args = parser.parse_args(argv)
    codes = set(args.codes.split(","))
    for tree in args.trees:
        out = measure(tree, codes)
        total = out["gates s"] + out["gates of the rules s"] + out["parse+index s"] + out["detect s"] + \
            out["detect of the rules s"]
        added = out["gates of the rules s"] + out["parse+index only for the rules s"] + out["detect of the rules s"]
        print(f"{tree}: {out['files']:,.0f} files, {out['past the text stage']:,.0f} past the text stage, "
              f"{out['past it for the rules']:,.0f} of them for {args.codes} ({out['only for the rules']:,.0f} only "
              f"for them); their findings {out['findings of the rules']:,.0f}")
        print("  " + "; ".join(f"{name[:-2]} {value:.2f} s" for name, value in out.items() if name.endswith(" s")))
        print(f"  {args.codes} add {added:.2f} s of {total:.2f} s CPU (gates, parse+index, detect): {added / total:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
