"""Cheap text and stdlib-``ast`` questions for the input-pipeline rules' gates (TL102, TL103; TL401-TL403's
text gates).

Each answer is a superset of what the rules can report: False only where the rule certainly finds nothing.
``.to(`` occurs in a great many files; these stages keep the LibCST parse for the few that move a fresh
tensor or batch. (TL401-TL403 detect on the index, with ``torchlint.facts.loaders``.)
"""

from __future__ import annotations

import ast
import re
from typing import Dict, List, Optional, Set, Tuple, Union

from torchlint.ast_index import AstIndex, index_of
from torchlint.ast_index import _children as ast_children
from torchlint.text_prefilter import CALL_GAP, GAP, finditer_word, has_method_call, search_word, statement_end

# A name that says it holds a loader. Case-sensitive, so that the text stage can test it without lowering
# the whole text: `loader`, `train_loader`, `DataLoader`, `LOADER`, `val_dl`, `dl`.
LOADER_NAME = re.compile(r"[lL]oader|LOADER|_dl$|^dl$|_dl_|^dl_")
_DL_TEXT = re.compile(r"dl(?=\b|_)")  # starts with a literal: far faster than a leading \b or class
# Searches that start with a literal (fast in `re`), spaced as Python allows (see text_prefilter):
# `x .to (dev)`, `(torch.zeros(3)\n .cuda())`, `torch.zeros (3)`.
# One literal-led search per factory: `re` finds a literal prefix far faster than an alternation.
FACTORY_NAMES = ("zeros", "ones", "empty", "full", "eye", "Tensor", "arange", "linspace", "logspace", "rand")
_FACTORY_TEXTS = tuple(re.compile(name + (r"\w*" if name == "rand" else "") + CALL_GAP + r"\(") for name in FACTORY_NAMES)
# A factory imported under another name (`from torch import zeros as z`): `z(3).cuda()` is one too.
_FROM_TORCH_TEXT = re.compile(r"from" + GAP + r"torch\b[\w.\s\\]*import\b")  # with search_word
_FACTORY_ALIAS_TEXT = re.compile(r"\b(?:zeros|ones|empty|full|eye|Tensor|arange|linspace|logspace|rand\w*)" + GAP + r"as\b")
_MOVE_AFTER = re.compile(CALL_GAP + r"\." + GAP + r"(?:cuda|to)" + CALL_GAP + r"\(")  # `(torch.zeros(3)).cuda()`
_FACTORY_SCAN_LIMIT = 4000  # characters of arguments scanned; a longer call counts as a match


def may_move_to_device(text: str) -> bool:
    """Text stage: a ``.to(`` or ``.cuda(`` call."""
    return has_method_call(text, "to") or has_method_call(text, "cuda")


def may_step(text: str) -> bool:
    """Text stage of a training step: ``backward`` or a ``.step(`` call."""
    return "backward" in text or has_method_call(text, "step")


def may_name_a_loader(text: str) -> bool:
    """Text stage of TL103: some identifier may match ``LOADER_NAME``."""
    if "oader" in text or "OADER" in text:
        return True
    for match in _DL_TEXT.finditer(text):
        start = match.start()
        if start == 0 or not text[start - 1].isalnum():
            return True
    return False


def may_chain_factory_into_move(text: str) -> bool:
    """Text stage of TL102: a factory call whose closing parenthesis is followed by ``.to(``/``.cuda(``.
    The arguments are scanned with their strings and comments skipped; anything the scan cannot follow (an
    unterminated string, a call longer than the limit) counts as a match, so the stage never misses one."""
    for name, factory in zip(FACTORY_NAMES, _FACTORY_TEXTS):
        if name in text:
            for match in finditer_word(factory, text):
                end = _closing_paren(text, match.end())
                if end is None or _MOVE_AFTER.match(text, end):
                    return True
    return _imports_a_factory_alias(text)


def _imports_a_factory_alias(text: str) -> bool:
    """A ``from torch... import`` statement that names a factory ``as`` something else."""
    if "from" not in text:
        return False
    match = search_word(_FROM_TORCH_TEXT, text)
    while match is not None:
        if _FACTORY_ALIAS_TEXT.search(text, match.end(), statement_end(text, match.end())):
            return True
        match = search_word(_FROM_TORCH_TEXT, text, match.end())
    return False


# A `DataLoader(` call, however spaced, and the loader imported under another name (`DL(ds, 64, ...)`).
_LOADER_CALL_TEXT = re.compile(r"DataLoader" + CALL_GAP + r"\(")
_LOADER_ALIAS_TEXT = re.compile(r"DataLoader" + GAP + r"as\b")


def may_pass_positionally(text: str, index: int) -> bool:
    """Text stage: some ``DataLoader`` call may have an argument at position ``index`` (a top-level comma
    after ``index`` arguments, brackets, strings and comments followed), or the loader has another name."""
    for match in _LOADER_CALL_TEXT.finditer(text):
        commas = _top_level_commas(text, match.end(), index)
        if commas is None or commas >= index:
            return True
    return search_word(_LOADER_ALIAS_TEXT, text) is not None


def _top_level_commas(text: str, i: int, enough: int) -> Optional[int]:
    """The commas between the ``(`` before ``i`` and the bracket that closes it, outside inner brackets, up
    to ``enough``; None when the scan gives up (an unterminated string, a call longer than the limit)."""
    scanned = _scan_arguments(text, i, "([{", ")]}", enough)
    return None if scanned is None else scanned[1]


def _closing_paren(text: str, i: int) -> Optional[int]:
    """The index after the parenthesis that closes the one before ``i``; None when the scan gives up."""
    scanned = _scan_arguments(text, i, "(", ")")
    return None if scanned is None else scanned[0]


def _scan_arguments(text: str, i: int, opening: str, closing: str,
                    enough: Optional[int] = None) -> Optional[Tuple[int, int]]:
    """Scan from ``i``, just past an opening bracket, with strings and comments skipped and ``opening`` /
    ``closing`` brackets counted: (the index after the bracket that closes it, the commas met outside inner
    brackets), or (where the scan stopped, ``enough``) once that many commas are met; None when the scan
    gives up (an unterminated string, a call longer than the limit)."""
    depth, commas, limit = 1, 0, min(len(text), i + _FACTORY_SCAN_LIMIT)
    while i < limit:
        char = text[i]
        if char in opening:
            depth += 1
        elif char in closing:
            depth -= 1
            if not depth:
                return i + 1, commas
        elif char == "," and depth == 1:
            commas += 1
            if enough is not None and commas >= enough:
                return i + 1, commas
        elif char == "#":
            newline = text.find("\n", i)
            if newline < 0:
                return None
            i = newline
        elif char in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else char
            close = _string_end(text, i + len(quote), quote, limit)
            if close is None:
                return None
            i = close - 1
        i += 1
    return None


def _string_end(text: str, i: int, quote: str, limit: int) -> Optional[int]:
    while i < limit:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            return i + len(quote)
        if char == "\n" and len(quote) == 1:
            return None  # an unterminated one-line string: stop guessing
        i += 1
    return None


def last_name(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _keyword(call: ast.Call, name: str) -> Optional[ast.keyword]:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword
    return None


def has_star(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def is_move_without_non_blocking(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr not in {"to", "cuda"} or has_star(node) or _keyword(node, "non_blocking") is not None:
        return False
    owner = node.func.value
    while isinstance(owner, (ast.Attribute, ast.Subscript)):
        owner = owner.value
    return isinstance(owner, ast.Name)


def loop_may_move_batch(tree: ast.Module, text: str) -> bool:
    """A for loop that may iterate a loader and moves a name (or part of one) with ``.to``/``.cuda`` and no
    ``non_blocking=`` somewhere in its body (nested defs included). The moves and the loops come from the
    shared index; each loop that may iterate a loader then has its body searched for one of those moves,
    outer loops first, so that a loop inside a body already searched in vain is not searched again."""
    index = index_of(tree)
    moves = {id(info.node) for name in ("to", "cuda") for info in index.calls_by_name.get(name, ())
             if is_move_without_non_blocking(info.node)}
    if not moves:
        return False
    loader_anywhere = "DataLoader" in text  # loaders built here are tied by binding, whatever their names
    searched: Set[int] = set()  # for loops inside a body searched without finding a move
    for loop in index.loops:  # an enclosing loop comes before the loops in its body
        node = loop.node
        if type(node) not in (ast.For, ast.AsyncFor) or id(node) in searched:  # LibCST's For is both
            continue
        if not (loader_anywhere or _names_a_loader(node.iter)
                or (isinstance(node.iter, ast.Name) and _is_loader_valued(index, node.iter.id))):
            continue
        if _body_moves(node, moves, searched):
            return True
    return False


def _body_moves(loop: Union[ast.For, ast.AsyncFor], moves: Set[int], searched: Set[int]) -> bool:
    """Some node of ``moves`` under a statement of the loop's body; else the for loops met go to ``searched``."""
    stack: List[ast.AST] = list(loop.body)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Call:
            if id(node) in moves:
                return True
        elif kind is ast.For or kind is ast.AsyncFor:
            searched.add(id(node))
        stack.extend(ast_children(node))
    return False


def _is_loader_valued(index: AstIndex, name: str) -> bool:
    """``name`` is a target of an assignment whose value names a loader (``pbar = tqdm(train_loader)``)."""
    return any(_names_a_loader(value) for value in assigned_values(index).get(name, ()))


def assigned_values(index: AstIndex) -> Dict[str, List[ast.expr]]:
    """The values given to each name anywhere in the file (``name = value``, ``name: T = value``), from the
    index's bindings; built once per file."""
    assigned = getattr(index, "_assigned_values", None)
    if assigned is None:
        assigned = index._assigned_values = {}  # type: ignore[attr-defined]
        for names in index.bindings.values():
            for name, values in names.items():
                known = [value for value in values if value is not None]  # None: a loop target, a parameter...
                if known:
                    assigned.setdefault(name, []).extend(known)
    return assigned


def _names_a_loader(expr: ast.AST) -> bool:
    return any(name and LOADER_NAME.search(name) for name in (last_name(x) for x in ast.walk(expr)))
