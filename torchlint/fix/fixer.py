"""Apply the fixes of one pass to a module: non-overlapping fixes at once, then verify the output parses."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.fix.analysis import FileAnalysis
from torchlint.fix.fast_parse import parse_module as trusted_parse
from torchlint.rule import ImportRequest, Replacement, Report


@dataclass
class PassResult:
    code: str
    applied: List[Report] = field(default_factory=list)
    broken: List[Report] = field(default_factory=list)  # fixes whose output did not parse
    module: Optional[cst.Module] = None  # LibCST's tree of ``code`` where checking it parsed it (the next pass's)
    whole_module: bool = False  # ``code`` is LibCST's rendering of the whole module (not the source spliced)
    # where the source was spliced: (start, end, new text) of each changed statement (``FixEdits.spliced``)
    regions: Optional[List[Tuple[int, int, str]]] = None


class Replacer(cst.CSTTransformer):
    """Swaps the replaced nodes in. With ``on_path`` (every node above a replaced one), it enters only those
    nodes: LibCST rebuilds each node a transformer enters, and rebuilding the whole module for a fix or two
    was most of the time `fix` took."""

    def __init__(self, replacements: Dict[cst.CSTNode, Replacement],
                 on_path: Optional[Set[cst.CSTNode]] = None) -> None:
        super().__init__()
        self.replacements = replacements
        self.on_path = on_path

    def on_visit(self, node: cst.CSTNode) -> bool:
        if node in self.replacements:
            return False  # nothing inside a replaced node needs visiting
        return self.on_path is None or node in self.on_path

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        return self.replacements.get(original_node, updated_node)


class FixApplier:
    def __init__(self, module: cst.Module, analysis: FileAnalysis, path: str) -> None:
        self.module = module
        self.analysis = analysis
        self.path = path

    def apply(self, reports: Sequence[Report], source: str, next_pass_tree: bool = True) -> PassResult:
        """Apply every fix that does not overlap an earlier one; overlapping ones wait for the next pass.
        ``source``: the text the module was parsed from. ``next_pass_tree``: check the output with LibCST's
        parser and hand its tree to the next pass; without, the output is only compiled (LibCST wrote it;
        the caller carries a statements' tree back into the file and parses what the next pass needs)."""
        def check(code: str) -> Tuple[bool, Optional[cst.Module]]:
            return _checked(code, source, next_pass_tree)

        chosen = self._non_overlapping(reports)
        code, regions = self.fixed_text(chosen, source)
        ok, module = check(code)
        if ok:
            return PassResult(code, list(chosen), module=module, whole_module=regions is None, regions=regions)
        # Something broke: try each fix alone to name the culprits, then apply the rest together.
        good = [r for r in chosen if check(self.fixed_text([r], source)[0])[0]]
        broken = [r for r in chosen if r not in good]
        if not good:
            return PassResult(source, broken=broken)
        code, regions = self.fixed_text(good, source)
        ok, module = check(code)
        if not ok:  # fixes that break only together: apply none
            return PassResult(source, broken=list(chosen))
        return PassResult(code, good, broken, module, whole_module=regions is None, regions=regions)

    def fixed_text(self, reports: Sequence[Report], source: str) -> Tuple[str, Optional[List[Tuple[int, int, str]]]]:
        """``source`` with these (non-overlapping) fixes, and the regions it changed where only the changed
        statements were rendered and put in place (``FixEdits.spliced``); None: the whole module was rendered."""
        from torchlint.fix.edits import FixEdits, spliced_text  # imports this module

        regions = FixEdits(self.module, self.analysis, self.path, source).spliced(reports)
        if regions is not None:
            return spliced_text(source, regions), regions
        return self.render(reports), None

    def _non_overlapping(self, reports: Sequence[Report]) -> List[Report]:
        """The reports, in order, whose fixes replace no node inside or around one an earlier chosen fix
        replaces. Nodes are subtrees, nested or apart: two overlap where their spans (pre-order numbers,
        ``FileAnalysis.spans``) intersect, so the taken spans stay apart and sorted, and each new one is
        looked up by bisection (a pairwise test cost fixes x fixes on a long file)."""
        starts: List[int] = []
        ends: List[int] = []  # of the taken spans, sorted by start (apart, so by end too)
        chosen = []
        for report in reports:
            assert report.fix is not None
            spans = sorted((self.analysis.spans[node] for node in report.fix.replacements), key=lambda s: (s[0], -s[1]))
            if any(_intersects(starts, ends, span) for span in spans):
                continue
            outermost: List[Tuple[int, int]] = []
            for span in spans:  # one fix's own targets may nest: keep the outer ones
                if not outermost or span[0] >= outermost[-1][1]:
                    outermost.append(span)
            for first, end in outermost:
                at = bisect.bisect_left(starts, first)
                starts.insert(at, first)
                ends.insert(at, end)
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
        module = self.module.visit(Replacer(replacements, self._path_to(replacements)))
        if imports:
            module = _add_imports(module, imports)
        return module.code

    def _path_to(self, targets: Dict[cst.CSTNode, Replacement]) -> Optional[Set[cst.CSTNode]]:
        return nodes_above(self.analysis, targets)


def _intersects(starts: List[int], ends: List[int], span: Tuple[int, int]) -> bool:
    """Whether ``span`` intersects one of the sorted, pairwise apart spans ``starts``/``ends`` (half open)."""
    at = bisect.bisect_left(starts, span[1]) - 1  # the last one to start before ``span`` ends
    return at >= 0 and ends[at] > span[0]


def nodes_above(analysis: FileAnalysis, targets: Iterable[cst.CSTNode]) -> Optional[Set[cst.CSTNode]]:
    """Every node above a target, the module included; None (enter everything) where a target is not in
    the analysed tree."""
    parents = analysis.parents
    path: Set[cst.CSTNode] = set()
    for target in targets:
        if target not in parents:
            return None
        node = parents[target]
        while node is not None and node not in path:
            path.add(node)
            node = parents.get(node)
    return path


def replaced_within(root: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode, analysis: FileAnalysis) -> cst.CSTNode:
    """``root.deep_replace(old, new)``, rebuilding only the nodes from ``old`` up to ``root``: deep_replace
    (or a transformer) visits all of ``root``, which made a rule's fix inside a loop cost the loop's size."""
    node, replacement = old, new
    while node is not root:
        parent = analysis.parents[node]
        replacement = _with_child(parent, node, replacement)
        node = parent
    return replacement


def _with_child(parent: cst.CSTNode, child: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
    for name in parent.__dataclass_fields__:
        value = getattr(parent, name)
        if value is child:
            return parent.with_changes(**{name: new})
        if isinstance(value, (tuple, list)):
            for index, item in enumerate(value):
                if item is child:
                    return parent.with_changes(**{name: (*value[:index], new, *value[index + 1:])})
    raise ValueError("not a child of its parent")  # the analysis and the tree disagree: never expected


def _add_imports(module: cst.Module, requests: Sequence[ImportRequest]) -> cst.Module:
    from libcst.codemod import CodemodContext  # about 100 ms to import: only for fixes that add an import
    from libcst.codemod.visitors import AddImportsVisitor

    context = CodemodContext()
    for request in dict.fromkeys(requests):
        AddImportsVisitor.add_needed_import(context, request.module, request.name)
    return AddImportsVisitor(context).transform_module(module)


def _checked(code: str, original: str, parse: bool = True) -> Tuple[bool, Optional[cst.Module]]:
    """Whether the fixed ``code`` holds, and LibCST's tree of it (``parse``): it must parse with LibCST
    (where asked) and compile (compile is skipped where the ``original`` did not compile either)."""
    module = None
    if parse:
        try:
            module = trusted_parse(code)  # nodes LibCST's parser builds from text are valid by construction
        except Exception:
            return False, None
    try:
        compile(code, "<torchlint-fix>", "exec", dont_inherit=True)
    except SyntaxError:
        try:
            compile(original, "<torchlint-input>", "exec", dont_inherit=True)
        except SyntaxError:
            return True, module
        return False, None
    return True, module
