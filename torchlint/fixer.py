"""Apply the fixes of one pass to a module: non-overlapping fixes at once, then verify the output parses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Sequence

import libcst as cst

from torchlint.analysis import FileAnalysis
from torchlint.rule import ImportRequest, Replacement, Report


@dataclass
class PassResult:
    code: str
    applied: List[Report] = field(default_factory=list)
    broken: List[Report] = field(default_factory=list)  # fixes whose output did not parse


class _Replacer(cst.CSTTransformer):
    def __init__(self, replacements: Dict[cst.CSTNode, Replacement]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node not in self.replacements  # nothing inside a replaced node needs visiting

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        return self.replacements.get(original_node, updated_node)


class FixApplier:
    def __init__(self, module: cst.Module, analysis: FileAnalysis, path: str) -> None:
        self.module = module
        self.analysis = analysis
        self.path = path

    def apply(self, reports: Sequence[Report]) -> PassResult:
        """Apply every fix that does not overlap an earlier one; overlapping ones wait for the next pass."""
        chosen = self._non_overlapping(reports)
        code = self.render(chosen)
        if _is_valid(code, self.module.code):
            return PassResult(code, applied=list(chosen))
        # Something broke: try each fix alone to name the culprits, then apply the rest together.
        good = [r for r in chosen if _is_valid(self.render([r]), self.module.code)]
        broken = [r for r in chosen if r not in good]
        code = self.render(good) if good else self.module.code
        if good and not _is_valid(code, self.module.code):  # fixes that break only together: apply none
            return PassResult(self.module.code, broken=list(chosen))
        return PassResult(code, applied=good, broken=broken)

    def _non_overlapping(self, reports: Sequence[Report]) -> List[Report]:
        taken: List[cst.CSTNode] = []
        chosen = []
        for report in reports:
            assert report.fix is not None
            targets = list(report.fix.replacements)
            if any(self.analysis.contains(a, b) or self.analysis.contains(b, a) for a in taken for b in targets):
                continue
            taken.extend(targets)
            chosen.append(report)
        return chosen

    def render(self, reports: Sequence[Report]) -> str:
        """The module's code with these (non-overlapping) fixes applied."""
        replacements: Dict[cst.CSTNode, Replacement] = {}
        imports: List[ImportRequest] = []
        for report in reports:
            assert report.fix is not None
            replacements.update(report.fix.replacements)
            imports.extend(report.fix.imports)
        module = self.module.visit(_Replacer(replacements))
        if imports:
            module = _add_imports(module, imports)
        return module.code


def _add_imports(module: cst.Module, requests: Sequence[ImportRequest]) -> cst.Module:
    from libcst.codemod import CodemodContext  # about 100 ms to import: only for fixes that add an import
    from libcst.codemod.visitors import AddImportsVisitor

    context = CodemodContext()
    for request in dict.fromkeys(requests):
        AddImportsVisitor.add_needed_import(context, request.module, request.name)
    return AddImportsVisitor(context).transform_module(module)


def _is_valid(code: str, original: str) -> bool:
    """The output must parse with LibCST and compile; compile is skipped where the input did not compile."""
    try:
        cst.parse_module(code)
    except Exception:
        return False
    try:
        compile(code, "<torchlint-fix>", "exec", dont_inherit=True)
    except SyntaxError:
        try:
            compile(original, "<torchlint-input>", "exec", dont_inherit=True)
        except SyntaxError:
            return True
        return False
    return True
