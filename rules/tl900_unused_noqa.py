"""TL900: `# noqa: TLxxx` comments that suppress nothing."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Optional, Tuple, Union

import libcst as cst

from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule
from torchlint.report.suppression import LINE_NOQA, Suppressions

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis

_TL_CODE = re.compile(r"^TL\d{3}$")
# Rebuild a comment's owner with a new comment (None: drop the comment and the whitespace before it).
Rebuild = Callable[[Optional[str]], "Union[cst.CSTNode, cst.RemovalSentinel]"]


class UnusedNoqa(Rule):
    """## What it does
    Flags `# noqa` comments that name torchlint codes (`TL...`) which suppress nothing on their line: the
    finding was fixed, the code moved, or the code is not a torchlint rule at all (`TL999`). Codes of other
    tools (`E501`, `F401`) and bare `# noqa` are left alone, as are codes of rules that are not selected for
    the file (they cannot be judged). Files with a line that holds only a backslash (a line continuation)
    are left alone too: LibCST, which rebuilds the comment for the fix, keeps no trace of such a line, so
    the fix could not tell which line a comment is on.

    ## Why is this slow?
    It is not: a stale `# noqa` hides the next real finding on that line, so a slow pattern written there
    later is never reported. Cleaning them keeps suppressions meaning what they say.

    ## Example
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)  # noqa: TL501
    ```

    ## Use instead
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ```

    ## Fix safety
    Safe: the fix removes only the unused codes (`# noqa: TL101, TL501` becomes `# noqa: TL101`), keeps other
    tools' codes and any other text of the comment, and removes the comment only when nothing is left. Comments
    inside brackets and at the very top or bottom of a file are reported without a fix. Ruff's `RUF100` would
    delete these codes as unknown to it: set `lint.external = ["TL"]` in Ruff's configuration.

    ## PyTorch versions
    All.
    """

    code = "TL900"
    name = "unused-noqa"
    message = "unused `noqa` directive"
    summary = "`# noqa: TLxxx` comments that suppress nothing"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.SAFE,)
    required_patterns = (r"(?i)#\s*noqa\s*:\s*[^\n]*TL",)
    text_gate = (("#",), ("qa", "qA", "Qa", "QA"))  # `noqa` in any case ends so
    runs_after_suppression = True

    def detect(self, ctx: IndexContext) -> None:
        """Nothing to find before suppression: see ``check_suppressions``."""

    def check_suppressions(self, ctx: IndexContext, suppressions: Suppressions, selected: FrozenSet) -> None:
        from torchlint.registry import rules_by_code

        known, used = set(rules_by_code()), suppressions.used
        found = []
        for line, (column, comment) in suppressions.directives.items():
            match = LINE_NOQA.search(comment)
            if match is None or not match.group("codes"):
                continue
            codes = re.split(r"[\s,]+", match.group("codes").strip())
            unused = [
                code for code in codes
                if _TL_CODE.match(code.upper()) and code.upper() != self.code
                and (code.upper() not in known or (code.upper() in selected and (line, code.upper()) not in used))
            ]
            if not unused:
                continue
            kinds = ["unknown" if c.upper() not in known else "unused" for c in unused]
            detail = ", ".join(f"`{c}`" for c in unused)
            label = kinds[0] if len(set(kinds)) == 1 else "unused or unknown"
            message = f"unused `noqa` directive ({label}: {detail}); remove it"
            new_value = _without(comment, match, [c for c in codes if c not in unused])
            found.append(((line, column, line, column + len(comment)), message, new_value))
        if not found:
            return
        from torchlint.fix.positions import has_continuation_only_line  # (it loads LibCST: only for a finding)

        if has_continuation_only_line(ctx.source):
            return  # LibCST's comments, which the fix rebuilds, are a line short below such a line
        for span, message, new_value in found:
            # `refused` is the message itself: a comment inside brackets, or in the file's header or footer,
            # has no statement to rebuild and is reported without a fix
            ctx.report_at(span, message, Rewrite(functools.partial(_rebuilt, span[0], span[1], new_value), message))


def _rebuilt(line: int, column: int, new_value: Optional[str], module: cst.Module,
             analysis: "FileAnalysis") -> Union[Fix, str]:
    """The statement (or block) that owns the comment at (line, column), rebuilt with ``new_value``."""
    rebuild = _owned_comments(analysis).get((line, column))
    if rebuild is None:
        return ""
    owner, replacement = rebuild(new_value)
    return Fix.replace(owner, replacement, Applicability.SAFE)


def _owned_comments(analysis: "FileAnalysis") -> Dict[Tuple[int, int], Callable]:
    """(line, column) -> how to rebuild the owner, of every noqa comment a statement or block owns; found
    once per file."""
    found = analysis.shared.get("tl900.owned_comments")
    if found is None:
        from torchlint.fix.positions import node_spans

        finder = _noqa_comments_class()()
        analysis.module.visit(finder)
        owned = [(comment, rebuild) for comment, rebuild in finder.found if rebuild is not None]
        spans = node_spans(analysis.module, [comment for comment, _ in owned])
        found = analysis.shared["tl900.owned_comments"] = {spans[c][:2]: rebuild for c, rebuild in owned}
    return found  # type: ignore[return-value]


def _without(value: str, match: "re.Match[str]", kept: List[str]) -> Optional[str]:
    """The comment with only the ``kept`` codes in its noqa directive; None when nothing is left of it."""
    if kept:
        start, end = match.span("codes")
        return value[:start] + ", ".join(kept) + value[end:]
    before, after = value[: match.start()], value[match.end():]
    if not (before + after).strip("# \t"):
        return None
    if not before.strip():  # the directive opened the comment: its reason stays a comment
        return "# " + after.strip()
    return (before + after).rstrip()


@functools.lru_cache(maxsize=None)
def _noqa_comments_class() -> type:
    """The visitor class, made on first use: subclassing ``cst.CSTVisitor`` at import time would load
    libcst on every run, also where no file reaches the LibCST stage (torchlint/fix/deferred.py)."""

    class _NoqaComments(cst.CSTVisitor):
        """Every comment with a noqa directive, and how to rebuild the statement (or block) that owns it."""

        def __init__(self) -> None:
            super().__init__()
            self.found: List[Tuple[cst.Comment, Optional[Callable]]] = []
            self._owned: set = set()

        def _add(self, comment: Optional[cst.Comment], rebuild: Optional[Callable]) -> None:
            if comment is not None and LINE_NOQA.search(comment.value) and id(comment) not in self._owned:
                self._owned.add(id(comment))
                self.found.append((comment, rebuild))

        def _trailing(self, owner: cst.CSTNode, field: str) -> None:
            trailing: cst.TrailingWhitespace = getattr(owner, field)

            def rebuild(value: Optional[str]):
                if value is None:
                    new = trailing.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)
                else:
                    new = trailing.with_changes(comment=cst.Comment(value))
                return owner, owner.with_changes(**{field: new})

            self._add(trailing.comment, rebuild)

        def _leading(self, owner: cst.CSTNode) -> None:
            for index, empty in enumerate(owner.leading_lines):
                def rebuild(value: Optional[str], index: int = index, empty: cst.EmptyLine = empty):
                    lines = list(owner.leading_lines)
                    if value is None:
                        del lines[index]
                    else:
                        lines[index] = empty.with_changes(comment=cst.Comment(value))
                    return owner, owner.with_changes(leading_lines=lines)

                self._add(empty.comment, rebuild)

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            self._leading(node)
            self._trailing(node, "trailing_whitespace")

        def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
            self._trailing(node, "trailing_whitespace")

        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            self._trailing(node, "header")

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, cst.BaseCompoundStatement):
                self._leading(node)
            elif isinstance(node, cst.Comment):
                self._add(node, None)  # inside brackets, a block's footer, the file's header or footer: no fix
            return super().on_visit(node)

    return _NoqaComments
