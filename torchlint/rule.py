"""The rule base class and what a rule reports: diagnostics and fixes."""

from __future__ import annotations

import ast
import enum
import re
from functools import lru_cache
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Mapping, Optional, Sequence, Tuple, Union

import libcst as cst

from torchlint.facts.text_gates import contains

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis
    from torchlint.facts.index import AstIndex, Extent, StatementLine
    from torchlint.config import Settings
    from torchlint.facts.project import ProjectModel
    from torchlint.report.suppression import Suppressions

RULE_CODE = re.compile(r"^TL\d{3}$")
DOC_HEADINGS = (
    "## What it does",
    "## Why is this slow?",
    "## Example",
    "## Use instead",
    "## Fix safety",
    "## PyTorch versions",
)


class Applicability(str, enum.Enum):
    """How sure a fix is to keep the program's meaning (as in Ruff)."""

    SAFE = "safe"  # applied by `torchlint fix`
    UNSAFE = "unsafe"  # applied only with --unsafe-fixes: it can change behaviour


class FixAvailability(str, enum.Enum):
    NONE = "none"
    SOMETIMES = "sometimes"
    ALWAYS = "always"


# What may stand in for a node: a new node, several statements, or nothing. (A string at run time: this
# module must not touch libcst when imported, see docs/architecture.md.)
if TYPE_CHECKING:
    Replacement = Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]
else:
    Replacement = "Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]"


@dataclass(frozen=True)
class ImportRequest:
    """An import a fix needs: ``import module`` or ``from module import name``."""

    module: str
    name: Optional[str] = None


@dataclass
class Fix:
    """Node replacements that are applied together or not at all.

    Keys are nodes of the parsed module (matched by identity, never by equality).
    """

    replacements: Mapping[cst.CSTNode, Replacement]
    applicability: Applicability
    imports: Tuple[ImportRequest, ...] = ()

    @classmethod
    def replace(
        cls,
        node: cst.CSTNode,
        new: Replacement,
        applicability: Applicability,
        imports: Sequence[ImportRequest] = (),
    ) -> "Fix":
        return cls({node: new}, applicability, tuple(imports))


@dataclass(frozen=True)
class Rewrite:
    """The fix a finding on the index proposes. It is made on LibCST's tree only where a fix is shown or
    applied (``fix``, ``[*]``, JSON/SARIF/full edits): ``make(node, analysis)`` gets the LibCST twin of
    ``call`` (the same call, found by its place among the file's calls), or of ``block`` (a def or a
    ``for``/``while`` loop, by its place among the file's defs or loops), or the module where both are
    None, and returns the ``Fix``, or why it cannot be made in the user's layout; the finding then reads
    ``refused`` with that answer in place of ``{reason}``."""

    make: "Callable[[cst.CSTNode, FileAnalysis], Union[Fix, str]]"
    refused: str
    call: Optional[ast.Call] = None
    block: Optional[Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.While]] = None
    # What else `make` reads: the top-level statements beside the one holding `call` or `block` (the file's
    # imports always come), so `check` and `fix` can work on LibCST's tree of just those; a module rewrite
    # (neither `call` nor `block`) with none reads the whole file.
    statements: Tuple[ast.stmt, ...] = ()
    # All that `make` reads of the tree besides `statements` and the import table, where that is less than
    # the top-level statement around it: a node (the call itself, a block, the first statement of a block it
    # inserts into). `check` and `fix` then parse the statement that holds it and the headers of the blocks
    # around that (``fix.rewrites``), not its whole top-level statement.
    reads: Optional[ast.AST] = None


@dataclass
class Report:
    """What a rule says about one node, before suppressions are known. A rule that detects on the index
    reports an ``ast`` node, placed at once (``span``: line, column, end line, end column, as
    ``positions.node_spans`` gives them); a LibCST rule's node is placed later, with the others."""

    rule: "Rule"
    node: Union[cst.CSTNode, ast.AST, "StatementLine"]
    message: str
    fix: Optional[Fix] = None
    span: Optional[Tuple[int, int, int, int]] = None
    rewrite: Optional[Rewrite] = None  # a finding on the index: its fix, made where LibCST has parsed the file


@dataclass(frozen=True)
class Edit:
    line: int
    column: int
    end_line: int
    end_column: int
    content: str


def line_reference(line: int) -> str:
    """A line of the checked text, as a message names it ("the training loop at line 12"). A notebook's
    program is its cells joined, so its reporter turns each such reference into the cell's coordinates
    (``LINE_REFERENCE``, ``torchlint.run.notebook``)."""
    return f"line {line}"


LINE_REFERENCE = re.compile(r"(?<![\w`])line (\d+)\b")


@dataclass(frozen=True)
class Diagnostic:
    """A located finding, ready for the reporters. Lines and columns are 1-based."""

    code: str
    name: str
    message: str
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    fix: Optional[Applicability] = None
    # The fix as text edits (JSON output only): what replaces which range (1-based, end exclusive). They
    # give exactly `torchlint fix`'s text for this finding, added imports included.
    edits: Tuple["Edit", ...] = field(default=(), compare=False)
    cell: Optional[int] = None  # in a notebook: the 1-based cell number; line and column are in that cell

    @property
    def sort_key(self):
        return (self.path, self.cell or 0, self.line, self.column, self.code, self.message)


class IndexContext:
    """What a rule sees while detecting on one file's index (``torchlint.facts.index``): the program model
    every rule shares, built from the stdlib ``ast``."""

    def __init__(self, index: "AstIndex", settings: "Settings", path: str = "<string>",
                 source: Optional[str] = None, project: Optional["ProjectModel"] = None) -> None:
        self.index = index
        self.settings = settings
        self.path = path
        # the summaries of the project files this file imports (``torchlint.facts.project``); None where the
        # caller has no project (a text alone, the editor's buffer)
        self.project = project
        # the file's text: the index's, or given where CPython's parser rejects the file and there is no
        # index (rules that read only the text and the suppressions, TL900, still run there)
        self.source = source if source is not None else index.source
        self.reports: list[Report] = []
        self._rule: Optional[Rule] = None

    @property
    def torch_version(self) -> Tuple[int, int]:
        return self.settings.torch_version

    def report(self, node: Union[ast.AST, "Extent"], message: Optional[str] = None,
               rewrite: Optional[Rewrite] = None) -> None:
        assert self._rule is not None
        self.report_at(self.index.span(node), message, rewrite, node)

    def report_at(self, span: Tuple[int, int, int, int], message: Optional[str] = None,
                  rewrite: Optional[Rewrite] = None, node: Optional[ast.AST] = None) -> None:
        """A finding at ``span`` (line, column, end line, end column, as ``AstIndex.span`` gives them) where
        no node of the tree is the place: a comment."""
        assert self._rule is not None
        self.reports.append(Report(self._rule, node, message or self._rule.message, span=span, rewrite=rewrite))


class Rule:
    """One slow pattern. Subclasses live one per module in ``rules/``.

    The class docstring is the rule's documentation, in Markdown with the headings in ``DOC_HEADINGS``.
    """

    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case name of the bad pattern, e.g. "zero-grad-keeps-zeros"
    message: ClassVar[str]  # default message; reports may give a more specific one
    summary: ClassVar[str]  # one line for `torchlint rules`
    fix_availability: ClassVar[FixAvailability] = FixAvailability.NONE
    # The applicabilities its fixes can have (`torchlint explain` shows them; tests hold the fixtures to it).
    fix_applicabilities: ClassVar[Tuple[Applicability, ...]] = ()
    # Regexes that must all occur in a file's text for the rule to be able to fire. A file that no
    # selected rule can fire on is never parsed, so keep these tight.
    required_patterns: ClassVar[Tuple[str, ...]] = ()
    # Words a file's text must hold before the rule's module is even imported (``torchlint/rule_manifest.py``
    # carries them, so a file that passes no rule's gate loads no rule): each tuple needs one of its words,
    # as plain case-sensitive substrings. It must hold for every text ``may_fire`` accepts under any settings
    # (tests/test_rule_manifest.py checks and mutates every fixture); the engine tests it before
    # ``may_fire``, so a word the rule can fire without loses findings. After editing it, regenerate the
    # manifest: ``python -m torchlint.manifest``.
    text_gate: ClassVar[Tuple[Tuple[str, ...], ...]] = ()
    # Rules that give advice a project may have declined on purpose (DataParallel, Adam's L2 decay...) are
    # off by default, as Ruff keeps opinionated rules out of its defaults: `--extend-select TLxxx` or
    # `select = ["ALL"]` turns them on.
    default_enabled: ClassVar[bool] = True
    # The rule reports nothing in test code (``discovery.is_test_file``: the ``test-paths`` setting, by
    # default pytest files and files under a tests/, test/ or testing/ folder), whose speed does not matter.
    # The engine leaves it out for such a file before any stage, so its ``check`` does not test the path and
    # no huge test file is parsed for it.
    silent_in_test_files: ClassVar[bool] = False

    def detect(self, ctx: IndexContext) -> None:  # pragma: no cover - abstract
        """Find the pattern on the file's index and ``ctx.report`` each finding (docs/architecture.md, "One
        program model")."""
        raise NotImplementedError

    # A rule about the suppressions themselves (TL900) runs after the others' findings were matched with
    # the file's `# noqa` comments: the engine calls ``check_suppressions`` after every ``detect``.
    runs_after_suppression: ClassVar[bool] = False

    def check_suppressions(self, ctx: IndexContext, suppressions: "Suppressions", selected: "frozenset") -> None:
        """``suppressions``: the file's `# noqa` comments, ``used`` holding the (line, code) pairs of those
        that silenced a finding; ``selected``: the codes of the rules selected for this file. ``ctx.index``
        is None where CPython's parser rejects the file."""

    # --- helpers for the engine -------------------------------------------------------------
    @classmethod
    def doc(cls) -> str:
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def url(cls) -> str:
        return rule_url(cls.code)

    @classmethod
    def patterns_for(cls, settings: "Settings") -> Tuple[str, ...]:
        """The pre-filter for these settings; override where it depends on them (e.g. the torch version)."""
        return cls.required_patterns

    @classmethod
    def may_fire(cls, text: str, settings: "Settings") -> bool:
        return all(_compiled(p).search(text) for p in cls.patterns_for(settings))


def rule_url(code: str) -> str:
    """A rule's page in docs/rules/, generated from its docstring (`python -m torchlint.report.docs`)."""
    return f"https://github.com/torchlint/torchlint/blob/main/docs/rules/{code}.md"


def gate_passes(gate: Tuple[Tuple[str, ...], ...], text: str) -> bool:
    """``Rule.text_gate``'s test: each group has one of its words in the text."""
    return all(any(contains(text, word) for word in group) for group in gate)


@lru_cache(maxsize=None)
def _compiled(pattern: str) -> "re.Pattern[str]":
    return re.compile(pattern)


class RuleCrash(Exception):
    """A rule raised: a bug in torchlint, reported for the file instead of ending the run."""

    def __init__(self, rule: Rule, error: Exception) -> None:
        super().__init__(f"internal error in {rule.code} ({rule.name}): {type(error).__name__}: {error}; please report it")


def iter_reports(rules: Sequence[Rule], ctx: IndexContext, crashes: list) -> Iterator[Report]:
    """Each rule's reports (``detect``); a rule that raises loses its reports for this file and is listed
    in ``crashes``."""
    for rule in rules:
        ctx._rule = rule
        start = len(ctx.reports)
        try:
            rule.detect(ctx)
        except RecursionError:
            raise
        except Exception as error:  # noqa: BLE001 - one buggy rule must not stop the others
            del ctx.reports[start:]
            crashes.append(RuleCrash(rule, error))
            continue
        yield from ctx.reports[start:]
