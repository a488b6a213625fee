"""Is this file a training script, and does a statement in it run on every run of it?

File-level rules (mixed precision, cuDNN autotuning, fused optimizers, deterministic algorithms, debug
APIs) report only in code that trains: a file with a training loop (a loop that calls ``backward()`` or
steps an optimizer). Library code that defines models but never trains them has none, and stays silent.
They also need to know whether a setting is made on every run, or only under a flag (``if args.debug:``),
which is the author's decision and not a finding.

Each fact has a LibCST form (for ``check``) and a stdlib-``ast`` form for the pre-filter stage, which
answers False only where the LibCST form certainly does.
"""

from __future__ import annotations

import ast
import weakref
from functools import cached_property
from typing import Dict, List, Optional, Set

import libcst as cst

from torchlint.analysis import FileAnalysis, LoopInfo
from torchlint.ast_index import AstCallInfo, AstIndex, index_of
from torchlint.text_prefilter import call_text, has_method_call, search_word

_MAX_CALL_DEPTH = 4  # how far `runs_on_every_run` follows a function to its callers
# A training loop calls `backward(` (a method, or `torch.autograd.backward` imported by its name) or a
# `.step(` method (`FileAnalysis.is_backward_call`, `is_optimizer_step`), spaced as Python allows:
# `loss .backward ()`, `(optimizer\n .step())`. Searches with a literal prefix (see text_prefilter).
_BACKWARD_CALL_TEXT = call_text("backward")


# Every text ``may_train`` (and ``loader_prefilter.may_step``) accepts holds one of these words: the text gate
# (``Rule.text_gate``) of the rules that need a training loop.
TRAINING_WORDS = ("backward", "step")


def may_train(text: str) -> bool:
    """The text stage of "this file has a training loop"."""
    return ("backward" in text and search_word(_BACKWARD_CALL_TEXT, text) is not None) or has_method_call(text, "step")


def may_use_cuda(text: str) -> bool:
    """The text stage of ``cuda_evidence``: ``.cuda()``, ``.to(...)`` or a device."""
    return "cuda" in text or "device" in text or has_method_call(text, "to")


def any_of(text: str, *words: str) -> bool:
    """Some word occurs in the text (plain substring searches: faster than a regex alternation)."""
    return any(word in text for word in words)


def first_training_loop(analysis: FileAnalysis) -> Optional[LoopInfo]:
    """The first loop (in source order) that runs a training step per iteration."""
    return next(iter(analysis.training_loops()), None)


def loop_header(loop: LoopInfo) -> cst.CSTNode:
    """What a file-level finding points at: the loop's iterable (``for x in loader``) or its test."""
    node = loop.node
    return node.iter if isinstance(node, cst.For) else node.test


def is_main_guard(test: cst.BaseExpression) -> bool:
    """``if __name__ == "__main__":``: the script's entry point, not a condition."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    sides = [test.left, test.comparisons[0].comparator]
    names = [s for s in sides if isinstance(s, cst.Name) and s.value == "__name__"]
    strings = [s for s in sides if isinstance(s, cst.SimpleString) and s.evaluated_value == "__main__"]
    return bool(names and strings)


def condition_around(analysis: FileAnalysis, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The innermost ``if``/``else``, conditional expression, ``and``/``or``, ``while`` test or ``except``
    between ``node`` and its function (or module), or None. The ``__main__`` guard does not count."""
    child = node
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return None
        if isinstance(ancestor, cst.If) and not (is_main_guard(ancestor.test) and child is ancestor.body):
            return ancestor
        if isinstance(ancestor, (cst.Else, cst.IfExp, cst.BooleanOperation, cst.ExceptHandler, cst.ExceptStarHandler)):
            return ancestor
        if isinstance(ancestor, cst.While) and child is ancestor.test:
            return ancestor
        child = ancestor
    return None


def runs_on_every_run(analysis: FileAnalysis, node: cst.CSTNode, depth: int = 0) -> bool:
    """True where ``node`` runs whenever the script runs: at module level or in ``main()``, not under a
    condition, and, inside a function, only if some call of that function in this file does too. A function
    the file never calls (a helper for other files) is not known to run: False."""
    if condition_around(analysis, node) is not None:
        return False
    function = analysis.function_of(node)
    if function is None:
        return True
    if depth >= _MAX_CALL_DEPTH or not isinstance(function.node, cst.FunctionDef):
        return False
    for call in analysis.calls_by_name.get(function.name, ()):
        if analysis.contains(function.node, call):
            continue  # recursion
        if runs_on_every_run(analysis, call, depth + 1):
            return True
    return False


# --- the same facts on the stdlib ast (pre-filter stage) ---------------------------------------------

_TRAINING_CALLS = ("backward", "step")


class AstFacts:
    """What the pre-filter stages of the file-level rules ask of a file. Each fact is read off the shared
    index (``torchlint.ast_index``: one walk per file for every rule) the first time a rule asks for it."""

    def __init__(self, index: AstIndex) -> None:
        # Weak: the facts are kept on the index, and a strong reference back would be a cycle (no cycles per
        # file: the runner pauses the cyclic collector while a file is checked).
        self._index = weakref.ref(index)
        # Calls by the called name's last part (``AstCallInfo``s: ``.node`` is the call).
        self.calls_by_name: Dict[str, List[AstCallInfo]] = index.calls_by_name

    @property
    def index(self) -> AstIndex:
        index = self._index()
        assert index is not None, "the facts of an index outlived it"
        return index

    @cached_property
    def has_training_loop(self) -> bool:
        """A ``backward``/``step`` call inside a loop of the same function (header and ``else`` included; a
        def, lambda or class in between ends the loop): a superset of the calls that make ``FileAnalysis``
        call a loop a training loop."""
        if not any(name in self.calls_by_name for name in _TRAINING_CALLS):
            return False
        return any(ast_call_name(call) in _TRAINING_CALLS for loop in self.index.loops for call in loop.direct_calls)

    @cached_property
    def may_use_cuda(self) -> bool:
        """A ``.cuda()`` / ``.to(...)`` call or a ``device=`` argument: a superset of ``cuda_evidence``."""
        if "cuda" in self.calls_by_name or "to" in self.calls_by_name:
            return True
        return any(keyword.arg == "device" for info in self.index.calls for keyword in info.node.keywords)

    @cached_property
    def imported_roots(self) -> Set[str]:
        """Top-level packages imported (absolute imports without ``*``, as ``FileAnalysis.imports``)."""
        roots: Set[str] = set()
        for node in self.index.import_statements:
            if isinstance(node, ast.Import):
                roots.update(alias.name.split(".")[0] for alias in node.names)
            elif not node.level and node.module is not None and not any(alias.name == "*" for alias in node.names):
                roots.add(node.module.split(".")[0])
        return roots


def ast_facts(tree: ast.Module) -> AstFacts:
    """The facts of ``tree``, kept with its index so that every rule's stage shares them."""
    index = index_of(tree)
    facts = getattr(index, "_script_facts", None)
    if facts is None:
        facts = index._script_facts = AstFacts(index)  # type: ignore[attr-defined]
    return facts


def ast_has_training_loop(tree: ast.Module) -> bool:
    return ast_facts(tree).has_training_loop


def ast_call_name(call: ast.Call) -> Optional[str]:
    """The called name's last part, as ``analysis.call_name``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None
