"""Fast exact forms of the regex tests that text stages make on whole files.

Python's ``re`` finds a pattern that starts with a literal (``range\\s*\\(``) with a fast scan for that
literal, but a pattern that starts with ``\\b``, a class or an alternation is tried at every position of the
text: several times slower on a 200 KB file. So text stages search for the literal-prefix pattern and test
the word boundary by hand (``search_word``), and put a plain ``in`` test of a word every match must contain
before a regex whose matches are rare.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterator, Optional, Tuple


def is_word_char(char: str) -> bool:
    """What ``re``'s ``\\w`` matches in a str pattern (checked for every code point)."""
    return char.isalnum() or char == "_"


def search_word(pattern: "re.Pattern[str]", text: str, pos: int = 0) -> Optional["re.Match[str]"]:
    """``re.search(r"\\b" + pattern, text, pos)`` for a pattern that starts with a word character: the
    first match of ``pattern`` not preceded by a word character."""
    match = pattern.search(text, pos)
    while match is not None:
        start = match.start()
        if start == 0 or not is_word_char(text[start - 1]):
            return match
        match = pattern.search(text, start + 1)
    return None


def finditer_word(pattern: "re.Pattern[str]", text: str) -> Iterator["re.Match[str]"]:
    """``re.finditer(r"\\b" + pattern, text)`` for a pattern that starts with a word character and never
    matches the empty string."""
    match = search_word(pattern, text)
    while match is not None:
        yield match
        match = search_word(pattern, text, match.end())


# --- tokens apart ----------------------------------------------------------------------------------------
# Python lets spaces, `\` continuations and, inside brackets, line breaks and comments stand between any two
# tokens: `x .item()`, `torch. zeros_like`, `f (x)`, `(x\n .item())`, `x.  # note\n    item()`. A text
# stage that looks for `.item(` as one string misses those files, and a stage may answer "maybe" too often
# but never "nothing here" where the rule's check reports. These fragments stand for that gap in a regex;
# each alternative starts with a different character and a comment must run to its line's end, so a failed
# match does not backtrack.
GAP = r"(?:[\s\\]|#[^\r\n]*[\r\n])*"
# Before a call's `(`: also the closing parentheses of a parenthesised callee, `(optimizer.zero_grad)(False)`.
CALL_GAP = r"(?:[\s\\)]|#[^\r\n]*[\r\n])*"


@lru_cache(maxsize=None)
def call_text(name: str) -> "re.Pattern[str]":
    """A call of ``name`` (a regex that starts with a word character and ends the name: ``item`` does not
    match ``items(``), however far its ``(`` stands from it. Search it with ``search_word`` for a function
    (``float (x)``) or ``search_method`` for a method (``x. item ()``)."""
    return re.compile(name + CALL_GAP + r"\(")


@lru_cache(maxsize=None)
def call_with_text(name: str, word: str) -> "CallWithText":
    """A call of ``name`` whose arguments may hold ``word``; search it like a regex (``.search(text)``)."""
    return CallWithText(call_text(name), word)


class CallWithText:
    """A call whose text, from its name to the end of the line where its brackets close (``statement_end``),
    holds a word: a superset of its arguments, nested calls (``f(warn_only=bool(x), mode=True)``), comments
    and line breaks included. (A regex that stopped at the first ``)`` missed the word after a nested call.)"""

    def __init__(self, call: "re.Pattern[str]", word: str) -> None:
        self.call, self.word = call, word

    def search(self, text: str, pos: int = 0) -> bool:
        match = self.call.search(text, pos)
        while match is not None:
            if self.word in text[match.end():statement_end(text, match.start())]:
                return True
            match = self.call.search(text, match.end())
        return False


def with_newline_ends(text: str) -> str:
    """``text`` with old Mac line ends ("\\r" only) read as "\\n": stages that read lines or anchor on ``^``
    split on "\\n"."""
    return text if "\n" in text else text.replace("\r", "\n")


def after_dot(text: str, start: int) -> bool:
    """The token that ends before ``start`` may be a ``.``: the first character before it that is not a
    space, a line break or a ``\\`` is a dot, or the scan crossed a line break and the line it reached
    holds a ``#`` (its comment may follow a dot: ``x.  # note`` then ``item()`` inside brackets). A word
    character right before ``start`` answers False, so this also tests the word boundary."""
    i = start - 1
    crossed = False
    while i >= 0:
        char = text[i]
        if char == ".":
            return True
        if char in "\r\n":
            crossed = True
        elif char not in " \t\f\v\\":
            break
        i -= 1
    if not crossed or i < 0:
        return False
    line_start = max(text.rfind("\n", 0, i), text.rfind("\r", 0, i)) + 1
    return "#" in text[line_start:i + 1]


def search_method(pattern: "re.Pattern[str]", text: str, pos: int = 0) -> Optional["re.Match[str]"]:
    """The first match of ``pattern`` (which starts with a word character) that follows a dot, spaces and
    line breaks between them allowed: ``x.item(``, ``x . item (``, ``(x\\n .item())``."""
    match = pattern.search(text, pos)
    while match is not None:
        if after_dot(text, match.start()):
            return match
        match = pattern.search(text, match.start() + 1)
    return None


def has_method_call(text: str, name: str) -> bool:
    """``.name(`` in the text, however spaced: the plain substring first (nearly every file that has the
    call spells it so), then the spaced forms. Several rules ask this of the same text (``.to(``,
    ``.step(``): the answers for the last text are kept."""
    answers = _answers_for(text)
    key = ("call", name)
    answer = answers.get(key)
    if answer is None:
        answer = answers[key] = ("." + name + "(" in text
                                 or (name in text and search_method(call_text(name), text) is not None))
    return answer


def contains(text: str, word: str) -> bool:
    """``word in text``, remembered for the last text: the gates of 30 rules ask 64 words of each file,
    most of them several times (`backward`, `step`), and a word a file lacks costs a scan of all of it."""
    answers = _answers_for(text)
    answer = answers.get(word)
    if answer is None:
        answer = answers[word] = word in text
    return answer


def lowered(text: str) -> str:
    """``text.lower()``, made once per text: four rules' gates read the lowered file."""
    answers = _answers_for(text)
    low = answers.get(lowered)
    if low is None:
        low = answers[lowered] = text.lower()
    return low


def _answers_for(text: str) -> dict:
    memo = _last_answers
    if memo[0] is not text:
        memo = (text, {})
        _remember(memo)
    return memo[1]


# (text, {question: answer}) of the last text asked about. Replaced whole, never changed in place for another
# text, so that threads sharing it at worst lose an answer, never read one given for another text.
_last_answers: "tuple" = (None, {})


def _remember(memo: "tuple") -> None:
    global _last_answers
    _last_answers = memo


def statement_end(text: str, pos: int, max_lines: int = 25) -> int:
    """Where the statement running through ``pos`` may end: the end of the first line from ``pos`` on
    after which no bracket opened since ``pos`` is still open, no string is open and no ``\\`` continues
    it, at most ``max_lines`` lines on (``for p in (\\n    model.parameters()):``). Brackets in strings and
    comments are not counted: a closing one there (``for p in (  # :)``) would cut the statement short."""
    balance = 0
    quote = ""  # the string open at the end of the line read so far: ', ", \'\'\' or \"\"\"
    end = pos
    for _ in range(max_lines):
        end = text.find("\n", pos)
        if end == -1:
            return len(text)
        line = text[pos:end]
        if quote or "#" in line or "'" in line or '"' in line:
            balance, quote = _scan_line(line, balance, quote)
        else:  # nearly every line: no string or comment to step over
            balance += line.count("(") + line.count("[") + line.count("{") - line.count(")") - line.count("]") - line.count("}")
        if balance <= 0 and not quote and not line.rstrip().endswith("\\"):
            return end
        pos = end + 1
    return end


def _scan_line(line: str, balance: int, quote: str) -> "tuple[int, str]":
    """The bracket balance and the open string after ``line``, which starts inside the string ``quote``
    ("" for none); strings and the comment are stepped over."""
    i, n = 0, len(line)
    while i < n:
        char = line[i]
        if quote:
            if char == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
            i += 1
            continue
        if char == "#":
            break
        if char in "\"'":
            quote = char * 3 if line.startswith(char * 3, i) else char
            i += len(quote)
            continue
        if char in "([{":
            balance += 1
        elif char in ")]}":
            balance -= 1
        i += 1
    if len(quote) == 1 and not line.rstrip("\r").endswith("\\"):
        quote = ""  # a one-quote string ends with its line (unless a `\\` continues it)
    return balance, quote


# --- the gates several rules share ---------------------------------------------------------------------
# A training loop calls `backward(` (a method, or `torch.autograd.backward` imported by its name) or a
# `.step(` method (`AstIndex.is_backward_call`, `is_optimizer_step`), spaced as Python allows:
# `loss .backward ()`, `(optimizer\n .step())`.
_BACKWARD_CALL_TEXT = call_text("backward")
# Every text ``may_train`` accepts holds one of these words: the text gate
# (``Rule.text_gate``) of the rules that need a training loop.
TRAINING_WORDS = ("backward", "step")


def may_train(text: str) -> bool:
    """The text gate of "this file has a training loop" (``facts.script.first_training_loop``); asked by
    most rules of the same text, so remembered with ``contains``'s answers."""
    answers = _answers_for(text)
    answer = answers.get(may_train)
    if answer is None:
        answer = answers[may_train] = ((contains(text, "backward") and search_word(_BACKWARD_CALL_TEXT, text) is not None)
                                       or has_method_call(text, "step"))
    return answer


def may_use_cuda(text: str) -> bool:
    """The text gate of ``facts.devices.cuda_evidence``: ``.cuda()``, ``.to(...)`` or a device."""
    return contains(text, "cuda") or contains(text, "device") or has_method_call(text, "to")


def any_of(text: str, *words: str) -> bool:
    """Some word occurs in the text (plain substring searches: faster than a regex alternation)."""
    return any(contains(text, word) for word in words)


# --- the input-pipeline rules' gates (TL102, TL103, TL402, TL403) -------------------------------------
# Searches that start with a literal (fast in `re`), spaced as Python allows (``GAP``, ``CALL_GAP``):
# `x .to (dev)`, `(torch.zeros(3)\n .cuda())`, `torch.zeros (3)`.
# One literal-led search per factory: `re` finds a literal prefix far faster than an alternation.
FACTORY_NAMES = ("zeros", "ones", "empty", "full", "eye", "Tensor", "arange", "linspace", "logspace", "rand")
# The typed legacy constructors given sizes (`torch.FloatTensor(n, m)`); their names hold "Tensor", the gate's
# word, but not as a word of their own.
LEGACY_TENSOR_TYPES = ("FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor",
                       "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor")
_FACTORY_TEXTS = tuple((name, re.compile(name + (r"\w*" if name == "rand" else "") + CALL_GAP + r"\("))
                       for name in FACTORY_NAMES + LEGACY_TENSOR_TYPES)
# A factory imported under another name (`from torch import zeros as z`): `z(3).cuda()` is one too.
_FROM_TORCH_TEXT = re.compile(r"from" + GAP + r"torch\b[\w.\s\\]*import\b")  # with search_word
_FACTORY_ALIAS_TEXT = re.compile(r"\b(?:zeros|ones|empty|full|eye|\w*Tensor|arange|linspace|logspace|rand\w*)" + GAP + r"as\b")
_MOVE_AFTER = re.compile(CALL_GAP + r"\." + GAP + r"(?:cuda|to)" + CALL_GAP + r"\(")  # `(torch.zeros(3)).cuda()`
# View methods TL102 looks through between the factory and the move: `torch.zeros(n).unsqueeze(0).to(device)`.
VIEW_METHODS = ("unsqueeze", "squeeze", "view", "reshape", "flatten", "unflatten")
# ...and what fills the new tensor in place (`torch.FloatTensor(n, m).zero_().to(device)`), deterministically
# or from the generator, and the dtype conversions without arguments (`torch.zeros(n).float().to(device)`):
# the GPU tensor can take them as well.
FILL_METHODS = ("zero_", "fill_")
RANDOM_FILL_METHODS = ("normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_",
                       "log_normal_", "cauchy_")
CONVERSION_METHODS = ("float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte", "bool")
_VIEW_AFTER = re.compile(CALL_GAP + r"\." + GAP + r"(?:"
                         + "|".join(VIEW_METHODS + FILL_METHODS + RANDOM_FILL_METHODS + CONVERSION_METHODS)
                         + r")" + CALL_GAP + r"\(")
_SCAN_LIMIT = 4000  # characters of arguments scanned; a longer call counts as a match


def may_move_to_device(text: str) -> bool:
    """Text gate of a copy to a device: a ``.to(`` or ``.cuda(`` call."""
    return has_method_call(text, "to") or has_method_call(text, "cuda")


_DL_TEXT = re.compile(r"dl(?=\b|_)")  # starts with a literal: far faster than a leading \b or class


def may_name_a_loader(text: str) -> bool:
    """Text gate of TL103: some identifier may match ``facts.loaders.LOADER_NAME`` (a loader built here is
    called ``DataLoader``, which holds "oader" too)."""
    if "oader" in text or "OADER" in text:
        return True
    for match in _DL_TEXT.finditer(text):
        start = match.start()
        if start == 0 or not text[start - 1].isalnum():
            return True
    return False


def may_chain_factory_into_move(text: str) -> bool:
    """Text gate of TL102: a factory call whose closing parenthesis is followed by ``.to(``/``.cuda(``.
    The arguments are scanned with their strings and comments skipped; anything the scan cannot follow (an
    unterminated string, a call longer than the limit) counts as a match, so the gate never misses one."""
    for name, factory in _FACTORY_TEXTS:
        if name in text:
            for match in finditer_word(factory, text):
                end = _closing_paren(text, match.end())
                view = _VIEW_AFTER.match(text, end) if end is not None else None
                while view is not None and end is not None:  # through `.unsqueeze(0)`, `.view(1, -1)`
                    end = _closing_paren(text, view.end())
                    view = _VIEW_AFTER.match(text, end) if end is not None else None
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
    """Text gate of TL403: some ``DataLoader`` call may have an argument at position ``index`` (a top-level comma
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
    depth, commas, limit = 1, 0, min(len(text), i + _SCAN_LIMIT)
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
