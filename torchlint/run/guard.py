"""Guards around LibCST's parser, so that no input can crash or hang a run.

LibCST's native parser recurses once per level of nesting on the C stack: a few thousand nested brackets or
``and`` terms overflow it (a segfault: no exception to catch), and its time and memory grow faster than
linearly with depth (a 10,000-term sum takes minutes). So, before LibCST sees a file:

- ``parse_problem`` measures how deep its statements nest, from CPython's own parser (C, linear, never
  crashes; the tree is shared with the pre-filter) or, where CPython rejects the file, from its tokens;
  beyond ``MAX_NESTING`` the file gets one TL000 instead of a parse. It also rejects what CPython rejects in
  every version (NUL characters, a byte order mark past the start), which LibCST accepts.
- ``call_with_deep_stack`` runs the parse and everything after it on one long-lived thread with a large
  stack and a raised recursion limit, so that code CPython accepts (a 500-branch ``if/elif`` chain, a
  500-term sum) is handled rather than refused, and a deeper tree ends in a RecursionError, never a segfault.
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import threading
import tokenize
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

# Deeper than this, a statement gets a TL000. CPython itself refuses most expressions a few thousand levels
# deep; LibCST needs about 3 s for 1,000 levels and minutes for 10,000.
MAX_NESTING = 1000
_STACK_BYTES = 512 * 1024 * 1024  # virtual: only the pages a deep parse touches are ever used
_RECURSION_LIMIT = 40_000  # Python frames; well within _STACK_BYTES even for frames that recurse through C
_NEWLINE = re.compile(r"\r\n?|\n")


def call_with_deep_stack(func: Callable[..., Any], *args: Any) -> Any:
    """``func(*args)`` on a thread with a large stack and a high recursion limit; its exception re-raised."""
    worker = _deep_stack_worker()
    if worker is None:  # a platform without settable stacks: run here, guards still apply
        return func(*args)
    if threading.get_ident() == worker.ident:  # already on the deep stack (a notebook's cells, say)
        return func(*args)
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, _RECURSION_LIMIT))
    try:
        outcome = worker.call(func, args)
        while outcome is None:  # the worker was abandoned while this call waited for it: take a new one
            worker = _deep_stack_worker()
            outcome = worker.call(func, args) if worker is not None else (True, func(*args))
    finally:
        sys.setrecursionlimit(old_limit)
    ok, value = outcome
    if ok:
        return value
    raise value


class _DeepStackWorker:
    """One long-lived thread with a large stack that runs calls one at a time (a new thread for every file
    cost about 5% of a cold run over the training-code corpus)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.abandoned = False
        self._serial = threading.Lock()  # one call at a time (the language server may call from several threads)
        self._task: Optional[Tuple[Callable[..., Any], Tuple[Any, ...]]] = None
        self._outcome: Tuple[bool, Any] = (False, None)
        self._has_task = threading.Lock()
        self._has_task.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        previous = threading.stack_size(_STACK_BYTES)  # ValueError/RuntimeError: no settable stacks here
        try:
            thread = threading.Thread(target=self._serve, name="torchlint-deep-stack", daemon=True)
            thread.start()  # RuntimeError: no memory for the stack
        finally:
            threading.stack_size(previous)
        self.ident = thread.ident

    def call(self, func: Callable[..., Any], args: Tuple[Any, ...]) -> Optional[Tuple[bool, Any]]:
        """(True, result) or (False, exception); None where the worker was abandoned before this call's turn."""
        with self._serial:
            if self.abandoned:
                return None
            self._task = (func, args)
            try:
                self._has_task.release()
                self._done.acquire()
            except BaseException:  # Ctrl-C once the task was handed over: the thread may still be busy with it
                self.abandoned = True
                raise
            outcome, self._outcome, self._task = self._outcome, (False, None), None
            return outcome

    def _serve(self) -> None:
        while True:
            self._has_task.acquire()
            assert self._task is not None
            func, args = self._task
            try:
                self._outcome = (True, func(*args))
            except BaseException as exc:  # carried to the calling thread
                self._outcome = (False, exc)
            del func, args  # hold nothing of this file while waiting for the next
            self._done.release()


_worker: Optional[_DeepStackWorker] = None
_worker_lock = threading.Lock()
_no_settable_stacks = False  # learnt once: not tried again for every file


def _deep_stack_worker() -> Optional[_DeepStackWorker]:
    """This process's worker, started on first use (a forked child starts its own: threads do not fork)."""
    global _worker, _no_settable_stacks
    worker = _worker
    if worker is not None and worker.pid == os.getpid() and not worker.abandoned:
        return worker
    with _worker_lock:
        if _no_settable_stacks:
            return None
        if _worker is None or _worker.pid != os.getpid() or _worker.abandoned:
            try:
                _worker = _DeepStackWorker()
            except (ValueError, RuntimeError):
                _no_settable_stacks = True
                return None
        return _worker


# CPython's trees and indexes of the last texts parsed in this process, by text (oldest first): a file's check
# and the summaries other files read of it (``facts.project.summary_of``: its loaders, steps and uses) parse and
# index it once, in whichever order they come, while it is kept. Bounded by the characters of source held: a
# tree and its index take 50-75 bytes a character (256 Ki characters: 10-20 MiB more at the peak of a run). A
# text larger than a quarter of that is kept alone (as the last tree always was). Where CPython rejects a text,
# the error is kept; a RecursionError or MemoryError, which depends on the thread's stack (summaries are made on
# the main thread, checks on the deep stack's), never. A kept index keeps only what its walk built
# (``forget_answers``).
PARSED_CHARACTERS = 1 << 18
_parsed: "Dict[str, List[Any]]" = {}  # text -> [tree or None, error or None, its index or None]
_parsed_held = [0]


def stdlib_tree(source: str) -> Optional[ast.Module]:
    """CPython's ``ast`` of ``source``, or None where CPython rejects it. Parsed once while it is among the
    last texts parsed (``PARSED_CHARACTERS``): the pre-filter, the nesting guard, the check and the summaries
    of other files ask for the same text."""
    return _stdlib_parse(source)[0]


def stdlib_index(source: str):
    """The index (``facts.index.AstIndex``) of ``stdlib_tree(source)``, or None where CPython rejects it: built
    once while the text is kept, handed out each time with nothing in its ``shared`` facts (what a check
    computes there with its project model is not the next check's)."""
    index = _kept_index(source)
    if index is not None:
        index.shared = {}
    return index


@contextmanager
def borrowed_index(source: str) -> Iterator[Any]:
    """``stdlib_index(source)`` for a summary of the file alone: its ``shared`` facts are its own while it is
    borrowed, and what was there before (a check of that text under way) is given back after."""
    index = _kept_index(source)
    if index is None:
        yield None
        return
    held, index.shared = index.shared, {}
    try:
        yield index
    finally:
        index.shared = held
        if not held:
            forget_answers(index)


def forget_answers(index) -> None:
    """Drop what ``index`` answered lazily since it was built (parent links, line tables, memos: they take
    as much memory again as the tree) and its ``shared`` facts: a kept index holds its walk's facts alone."""
    built = _built_fields.get(type(index))
    if built is not None:
        for name in [name for name in index.__dict__ if name not in built]:
            del index.__dict__[name]
    index.shared = {}


_built_fields: Dict[type, frozenset] = {}  # the fields an index has once built, before any question


def _kept_index(source: str):
    entry = _parsed_entry(source)
    if entry[0] is None:
        return None
    index = entry[2]
    if index is None:
        from torchlint.facts.index import AstIndex

        index = AstIndex(entry[0], source)
        _built_fields.setdefault(type(index), frozenset(index.__dict__))
        if _parsed.get(source) is entry:
            entry[2] = index
    return index


def forget_parsed(source: str) -> None:
    """Drop ``source``'s tree and index: LibCST is about to parse the whole text, and it may be large."""
    entry = _parsed.pop(source, None)
    if entry is not None:
        _parsed_held[0] -= len(source)


def _stdlib_parse(source: str) -> Tuple[Optional[ast.Module], Optional[BaseException]]:
    entry = _parsed_entry(source)
    return entry[0], entry[1]


def _parsed_entry(source: str) -> List[Any]:
    entry = _parsed.get(source)
    if entry is not None:
        _parsed[source] = _parsed.pop(source)  # the newest again
        return entry
    tree: Optional[ast.Module] = None
    error: Optional[BaseException] = None
    try:
        with warnings.catch_warnings():  # invalid escape sequences and the like are not ours to report
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, OverflowError) as exc:
        error = exc
    except (RecursionError, MemoryError) as exc:  # this thread's limits, not the text's: not kept
        return [None, exc, None]
    entry = [tree, error, None]
    size = len(source)
    if size > PARSED_CHARACTERS // 4:  # kept alone (the last tree was always kept)
        _parsed.clear()
        _parsed_held[0] = 0
    while _parsed and _parsed_held[0] + size > PARSED_CHARACTERS:
        oldest = next(iter(_parsed))
        del _parsed[oldest]
        _parsed_held[0] -= len(oldest)
    _parsed[source] = entry
    _parsed_held[0] += size
    return entry


def parse_problem(source: str) -> Optional[Tuple[str, int, int]]:
    """Why LibCST must not be given ``source`` as (message, line, column), or None."""
    invalid = _invalid_everywhere(source)
    if invalid is not None:
        return invalid
    tree, error = _stdlib_parse(source)
    forget_parsed(source)  # LibCST parses next: the tree is not needed again, and may be large
    if isinstance(error, SyntaxError) and error.msg in _REJECTED_BY_EVERY_PYTHON:
        return f"syntax error: {error.msg}", error.lineno or 1, error.offset or 1
    depth, line = _ast_nesting(tree, source) if tree is not None else _token_nesting(source)
    del tree
    if depth <= MAX_NESTING:
        return None
    if isinstance(error, SyntaxError):  # CPython rejects it too: its message says why
        return f"syntax error: {error.msg}", error.lineno or 1, error.offset or 1
    return (f"too deeply nested for torchlint to parse: {depth} levels in one statement (the limit is "
            f"{MAX_NESTING}); the file was not checked", line, 1)


# CPython's errors that no version lifts, on code LibCST would check and fix: its tokenizer's limit of 200
# open brackets. (Other errors go to LibCST, which also takes syntax newer than this interpreter's.)
_REJECTED_BY_EVERY_PYTHON = frozenset({"too many nested parentheses"})


def _invalid_everywhere(source: str) -> Optional[Tuple[str, int, int]]:
    """What every CPython version rejects but LibCST accepts."""
    for char, message in (("\0", "source code cannot contain null bytes"),
                          ("\ufeff", "invalid non-printable character U+FEFF (a byte order mark past the start)")):
        index = source.find(char)
        if index >= 0:
            line = len(_NEWLINE.findall(source, 0, index)) + 1
            line_start = max(source.rfind("\n", 0, index), source.rfind("\r", 0, index)) + 1
            return f"syntax error: {message}", line, index - line_start + 1
    return None


# --- nesting measured on CPython's tree ----------------------------------------------------------------

_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _ast_nesting(tree: ast.Module, source: str) -> Tuple[int, int]:
    """(deepest nesting as LibCST will build it, its line). Only statements long enough to nest deeply are
    walked expression by expression: a statement of n characters nests at most n levels."""
    line_starts: Optional[List[int]] = None
    deepest, deepest_line = 0, 1
    stack: List[Tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest, deepest_line = depth, getattr(node, "lineno", 1)
        for name, value in ast.iter_fields(node):
            if name in _BLOCK_FIELDS and isinstance(value, list):
                # A block is one level deeper; LibCST nests each ``elif`` in the previous ``if`` (an ``orelse``
                # holding one If here), so a chain is as deep as it is long.
                stack.extend((child, depth + 1) for child in value)
                continue
            for child in value if isinstance(value, list) else (value,):
                if isinstance(child, ast.expr):
                    if line_starts is None:
                        line_starts = [0] + [m.end() for m in _NEWLINE.finditer(source)]
                    if _span(child, line_starts) > MAX_NESTING - depth:
                        expr_depth = _expr_nesting(child)
                        if depth + expr_depth > deepest:
                            deepest, deepest_line = depth + expr_depth, child.lineno
                elif isinstance(child, ast.AST) and not isinstance(child, ast.stmt):
                    stack.append((child, depth))  # arguments, keywords, with items: their expressions
    return deepest, deepest_line


def _span(expr: ast.expr, line_starts: List[int]) -> int:
    end_line = expr.end_lineno or expr.lineno
    end_col = expr.end_col_offset or 0
    if end_line == expr.lineno:
        return end_col - expr.col_offset
    return line_starts[end_line - 1] + end_col - line_starts[expr.lineno - 1] - expr.col_offset


def _expr_nesting(expr: ast.expr) -> int:
    deepest = 0
    stack: List[Tuple[ast.AST, int]] = [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.BoolOp):  # flat in CPython, one level per operator in LibCST
            depth += len(node.values) - 1
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


# --- nesting measured on tokens, where CPython rejects the file ---------------------------------------

_OPENERS, _CLOSERS = set("([{"), set(")]}")
_NESTING_WORDS = {"and", "or", "not", "if", "else", "lambda", "await", "in", "is"}
_SEPARATORS = {",", ";", "=", ":="}  # not ":": lambdas nest through it


def _token_nesting(source: str) -> Tuple[int, int]:
    """An upper-bound estimate: brackets nest, and every operator or keyword between two separators of
    the same bracket may add a level (a chain of n ``+`` or ``.`` is n levels deep in LibCST's tree)."""
    bases, run = [0], 0  # per open bracket: the depth it started at; the current run of operators
    deepest, deepest_line = 0, 1
    block_depth, elif_runs = 0, {}  # per indentation level: the ``elif`` keywords in a row there
    line_start = True
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            kind, text = tok.type, tok.string
            if kind == tokenize.INDENT:
                block_depth += 1
                continue
            if kind == tokenize.DEDENT:
                block_depth -= 1
                continue
            if line_start and kind not in (tokenize.NL, tokenize.COMMENT):
                line_start = False
                if text == "elif":
                    elif_runs[block_depth] = elif_runs.get(block_depth, 0) + 1
                elif text != "else":
                    elif_runs[block_depth] = 0
            if kind == tokenize.OP and text in _OPENERS:
                bases.append(bases[-1] + run + 1)
                run = 0
            elif kind == tokenize.OP and text in _CLOSERS:
                if len(bases) > 1:
                    bases.pop()
                run = 0
            elif (kind == tokenize.OP and text in _SEPARATORS) or kind in (tokenize.NEWLINE, tokenize.NL):
                run = 0
                line_start = line_start or kind == tokenize.NEWLINE
            elif kind == tokenize.OP or kind == tokenize.STRING or (kind == tokenize.NAME and text in _NESTING_WORDS):
                run += 1  # operators, and adjacent string literals, nest in LibCST's tree
            depth = max(bases[-1] + run, block_depth + max(elif_runs.values(), default=0))
            if depth > deepest:
                deepest, deepest_line = depth, tok.start[0]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # what was read so far is the estimate; the parse reports the error itself
    return deepest, deepest_line
