"""TL704: a Python loop over a tensor's indices doing elementwise tensor arithmetic."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import List, Optional, Set

import libcst as cst

from torchlint.analysis import FileAnalysis, LoopInfo, call_name, dotted_name, receiver, target_names, walk
from torchlint.ast_index import AstIndex, index_of
from torchlint.config import Settings
from torchlint.rule import FixAvailability, Rule, RuleContext
from torchlint.text_prefilter import (
    CALL_GAP, GAP, call_text, finditer_word, has_method_call, is_word_char, search_method, search_word,
    with_newline_ends,
)

# What a loop body may call and still be "only tensor arithmetic": elementwise math, reductions, views.
_TORCH_FUNCS = {
    "exp", "log", "log1p", "expm1", "sigmoid", "tanh", "relu", "abs", "sqrt", "rsqrt", "pow", "clamp", "clip",
    "where", "maximum", "minimum", "sum", "mean", "max", "min", "amax", "amin", "norm", "dot", "matmul", "mm",
    "mul", "add", "sub", "div", "neg", "sin", "cos", "erf", "sign", "floor", "ceil", "round", "square", "prod",
    "logsumexp", "softmax", "log_softmax", "outer", "lerp", "addcmul", "addcdiv", "exp2", "reciprocal",
}
_FUNCTIONAL = {"relu", "gelu", "silu", "sigmoid", "tanh", "softplus", "leaky_relu", "elu", "softmax",
               "log_softmax", "mse_loss", "l1_loss", "smooth_l1_loss", "normalize", "cosine_similarity"}
_TENSOR_METHODS = _TORCH_FUNCS | {
    "t", "transpose", "view", "reshape", "squeeze", "unsqueeze", "float", "double", "detach", "clone",
    "flatten", "contiguous", "expand", "expand_as", "view_as", "type_as", "exp_", "mul_", "add_", "sub_",
    "div_", "clamp_", "copy_", "fill_", "zero_", "sum", "mean", "std", "var", "argmax", "argmin",
}
# Ops whose result for a whole tensor is the stack of their results per element: only bodies made of these
# get a concrete one-expression suggestion (a reduction such as `x[i].sum()` does not become `x.sum()`).
_ELEMENTWISE = {
    "exp", "log", "log1p", "expm1", "sigmoid", "tanh", "relu", "abs", "sqrt", "rsqrt", "pow", "clamp", "clip",
    "where", "maximum", "minimum", "mul", "add", "sub", "div", "neg", "sin", "cos", "erf", "sign", "floor",
    "ceil", "round", "square", "lerp", "addcmul", "addcdiv", "exp2", "reciprocal", "gelu", "silu", "softplus",
    "leaky_relu", "elu", "float", "double", "detach", "clone", "contiguous", "type_as",
}
_VIA_LEN = " (len)"  # marks a `range(len(x))` bound: `x` may be a list, so the body must show tensors
_TENSOR_FACTORIES = re.compile(r"^torch\.(empty|zeros|ones|full|rand|randn)(_like)?$")
# `for i in range(` with a bound the rule accepts: `len(`, `x.shape[`, `x.size(`, or a name (`n)`), spaced
# and parenthesised as Python allows (`for (i) in range (\n    x . shape[0])`: see text_prefilter).
# Searched with `finditer_word` (a `\b` before `for`, tested by hand: the literal prefix is far faster).
_OPEN = r"(?:\(" + GAP + r")*"
_FOR_RANGE_TEXT = re.compile(
    r"for(?=[\s\\(])" + GAP + _OPEN + r"(\w+)(?=[\s\\)])" + CALL_GAP + r"in(?=[\s\\(])" + GAP + _OPEN + r"range"
    + CALL_GAP + r"\(" + GAP + _OPEN
    + r"(?:0" + GAP + r"," + GAP + _OPEN + r")?"
    + r"(?:len" + CALL_GAP + r"\(|(?:[\w.\[\]()\s\\]|#[^\r\n]*[\r\n])+?\." + GAP + r"(?:shape" + GAP + r"\[|size" + CALL_GAP
    + r"\()|\w+" + CALL_GAP + r"\))")
_SHAPE_TEXT = re.compile(r"shape\b")  # with search_method: `.shape`
_LEN_TEXT = call_text("len")  # with search_word: `\blen\s*\(`
_CONTEXT_DEF_TEXT = re.compile(r"def[\s\\]+(?:forward|training_step|train_step|train_one_step|compute_loss)\b")
_CONTEXT_FUNCTIONS = re.compile(r"^(forward|training_step|train_step|train_one_step|compute_loss)$")


@dataclass
class _Body:
    """What one pass over a loop body found."""

    index: str
    ok: bool = True
    why: str = ""
    indexed: Set[str] = field(default_factory=set)  # names subscripted with the loop variable
    written: Set[str] = field(default_factory=set)  # names whose `[i]` elements the body assigns
    appended: Set[str] = field(default_factory=set)  # lists the body appends to
    gathers: bool = False

    def stop(self, why: str) -> None:
        if self.ok:
            self.ok, self.why = False, why


class PythonLoopOverTensorElements(Rule):
    """## What it does
    Flags `for i in range(x.shape[0])`, `range(x.size(0))` and `range(len(x))` loops inside a model's
    `forward`, a `training_step`-style function, or a training loop, whose body does nothing but tensor
    arithmetic on elements indexed with `i` (`out[i] = torch.sigmoid(x[i]) * w[i]`,
    `rows.append(x[i] @ y[i])`, `picked[i] = logits[i, labels[i]]`). The message names the vectorized form
    where it is evident: an elementwise body becomes one expression over the whole dimension, a gather
    becomes indexing with a tensor.

    It stays silent where it cannot be sure the loop is a vectorizable map: the body calls anything that is
    not a known elementwise, reduction or view op (a submodule, a helper, `.item()`, `print`); it carries
    state from one iteration to the next (an accumulator `total += ...`, a name read before it is
    assigned, an element `out[i - 1]`, a scatter `out[idx[i]] = ...`); it has control flow (`if`, `break`,
    nested loops, `return`); or the loop runs outside a forward pass or training step (one-off setup code).
    Test files are skipped.

    ## Why is this slow?
    Each tensor op in the body is one small kernel launch per iteration, plus Python and dispatcher
    overhead (several microseconds each): a loop over a batch of 256 doing 4 ops makes 1,024 launches where
    one vectorized expression makes 4, and on a GPU the device idles between them. PyTorch's profiler reports
    the same thing at run time as the "For Loop Indexing Pattern" (repeated `aten::select`).

    ## Example
    ```python
    def forward(self, x, w):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = torch.sigmoid(x[i]) * w[i]
        return out
    ```

    ## Use instead
    ```python
    def forward(self, x, w):
        return torch.sigmoid(x) * w
    ```
    A gather `for i in range(n): picked[i] = logits[i, labels[i]]` becomes
    `picked = logits[torch.arange(n), labels]` (or `logits.gather(1, labels[:, None])`).

    ## Fix safety
    There is no fix: the vectorized form depends on the tensors' shapes (broadcasting a `w` that is indexed
    per row is not the same as one that is shared), which the code does not state. The message's
    suggestion assumes the looped dimension is the first of every indexed tensor.

    ## PyTorch versions
    All versions. `torch.vmap` (2.0+, `functorch.vmap` before) vectorizes bodies that have no obvious
    closed form.
    """

    code = "TL704"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "python-loop-over-tensor-elements"
    message = "Python loop over a tensor's elements: one kernel launch per op and element; vectorize it"
    summary = "Python loop over tensor indices doing elementwise tensor arithmetic"
    fix_availability = FixAvailability.NONE
    # On by default: silent unless the loop is provably a map in a forward pass or training step.
    default_enabled = True
    # The text stage: a `for i in range(` (see `_FOR_RANGE_TEXT`, which holds `\brange\s*\(`) after a length
    # (`.shape`, `.size(`, `len(`) and a forward method or a training step, whose next lines index something
    # with `i`. Literal-first searches, rarest and cheapest first (see torchlint.text_prefilter).
    text_gate = (("range",), ("shape", "len", "size"), ("backward", "step", "def"))

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        if "range" not in text:
            return False
        if not (".shape" in text or "len(" in text or has_method_call(text, "size") or search_word(_LEN_TEXT, text)
                or ("shape" in text and search_method(_SHAPE_TEXT, text))):
            return False
        if not ("backward" in text or has_method_call(text, "step") or _CONTEXT_DEF_TEXT.search(text)):
            return False
        text = with_newline_ends(text)  # the loop's lines are read by "\n"
        for match in finditer_word(_FOR_RANGE_TEXT, text):
            loop = _loop_text(text, match)
            if _uses_index(loop, match.group(1)) and _text_may_be_map(loop):
                return True
        return False

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings: Settings) -> bool:
        """A candidate loop (see `_ast_candidate_loop`) in a forward/step method or under a training loop."""
        index = index_of(tree)
        candidates = {id(loop.node) for loop in index.loops if _ast_candidate_loop(loop.node)}
        if not candidates:  # every loop is in the index: no region can hold one
            return False
        return any(id(node) in candidates for region in _ast_regions(index) for node in _ast_own_nodes(region))

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        if "range" not in a.calls_by_name:
            return
        for loop in a.loops:
            node = loop.node
            if not isinstance(node, cst.For) or node.asynchronous is not None or not isinstance(node.target, cst.Name):
                continue
            length = _range_over_tensor(a, node.iter)
            if length is None or not self._in_step_or_forward(a, loop):
                continue
            body = _read_body(a, node, node.target.value)
            if body is None or not body.ok or not body.indexed:
                continue
            owner = length[: -len(_VIA_LEN)] if length.endswith(_VIA_LEN) else length
            if owner != "?" and owner not in body.indexed:
                continue  # `range(len(a))` while indexing other things: the length is not the looped tensor's
            if length.endswith(_VIA_LEN) and not _fills_tensor(a, node, body):
                continue  # `len(feats)` of a list of feature maps of different shapes is no tensor dimension
            ctx.report(node, message=self._message(a, node, body, length))

    def _in_step_or_forward(self, a: FileAnalysis, loop: LoopInfo) -> bool:
        function = loop.function
        if function is not None and _CONTEXT_FUNCTIONS.match(function.name) and function.class_name is not None:
            return True
        if function is not None and function.name in ("training_step", "train_step", "train_one_step"):
            return True
        return any(outer.is_training for outer in _outer_loops(a, loop))

    def _message(self, a: FileAnalysis, node: cst.For, body: _Body, length: str) -> str:
        bound = a.module.code_for_node(node.iter)
        head = (f"Python loop `for {body.index} in {bound}` over a tensor's elements: each op in the body is one "
                f"kernel launch per element")
        hint = _vectorized_hint(a, node, body)
        return f"{head}; {hint}"


# --- the ast pre-filter: a superset of the loops `check` reports ----------------------------------------


def _ast_own_nodes(region: ast.AST):
    """Nodes under ``region`` without entering nested defs, lambdas or classes."""
    stack = list(ast.iter_child_nodes(region))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _ast_regions(index: AstIndex):
    """Where a reported loop can be: methods named like `forward`, and loops that run a training step."""
    for function in index.functions:  # `async def forward` too: LibCST's FunctionDef, which `check` reads, is both
        klass = index.class_of.get(function)
        if (_CONTEXT_FUNCTIONS.match(function.name) and klass is not None
                and any(item is function for item in klass.body)):  # a method, not a def inside one
            yield function
        elif function.name in ("training_step", "train_step", "train_one_step"):
            yield function
    # A loop whose own nodes (nested loops included; defs, lambdas and classes not) call `.backward(` or
    # `.step(`: the index's loops with such a call among the calls they run directly, and their enclosing loops.
    stepping = set()
    for loop in index.loops:
        if any(isinstance(call.func, ast.Attribute) and call.func.attr in ("backward", "step")
               for call in loop.direct_calls):
            while loop is not None and id(loop.node) not in stepping:
                stepping.add(id(loop.node))
                loop = loop.parent
    for loop in index.loops:
        if id(loop.node) in stepping:  # `async for` too: a LibCST For, as `check` reads it
            yield loop.node


def _ast_candidate_loop(node: ast.AST) -> bool:
    """`for NAME in range(<a length>)` whose body is simple statements that index something with NAME."""
    if not (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Call)
            and isinstance(node.iter.func, ast.Name) and node.iter.func.id == "range" and not node.orelse):
        return False
    args = node.iter.args
    if len(args) == 2 and isinstance(args[0], ast.Constant) and args[0].value == 0:
        args = args[1:]
    if len(args) != 1 or node.iter.keywords:
        return False
    bound = args[0]
    if not (isinstance(bound, ast.Name)  # `n = x.shape[0]` elsewhere: checked by the rule
            or (isinstance(bound, ast.Call) and isinstance(bound.func, ast.Name) and bound.func.id == "len")
            or (isinstance(bound, ast.Call) and isinstance(bound.func, ast.Attribute) and bound.func.attr == "size")
            or (isinstance(bound, ast.Subscript) and isinstance(bound.value, ast.Attribute)
                and bound.value.attr == "shape")):
        return False
    if not all(isinstance(s, (ast.Assign, ast.AugAssign, ast.Expr)) for s in node.body):
        return False
    index = node.target.id
    return any(isinstance(n, ast.Subscript) and any(isinstance(m, ast.Name) and m.id == index for m in ast.walk(n.slice))
               for s in node.body for n in ast.walk(s))


_STATEMENT_KEYWORD_TEXT = re.compile(
    r"\n[ \t]*(?:if|elif|else|for|while|with|try|except|finally|return|break|continue|raise|yield|del|assert"
    r"|pass|def|class|async|await|global|nonlocal|import|from|match)\b(?!\s*[=.\[(])")
_CALLED_NAME_TEXT = re.compile(r"(\w+)\s*\(")
_STRING_OR_COMMENT_TEXT = re.compile(r"#[^\n]*|'[^'\n]*'|\"[^\"\n]*\"")
_KEYWORDS = {"and", "or", "not", "in", "is", "if", "else", "lambda", "for", "range", "await", "yield", "return"}


_AFTER_INDEX_TEXT = re.compile(CALL_GAP + r"[\],:]")


def _uses_index(loop: str, index: str) -> bool:
    """``index`` as a subscript or one of its parts: ``x[i]``, ``x[b, i]``, ``x[ (i) ]`` (a comment line
    between the bracket and the name counts as "maybe")."""
    at = loop.find(index)
    while at != -1:
        end = at + len(index)
        if (at == 0 or not is_word_char(loop[at - 1])) and _AFTER_INDEX_TEXT.match(loop, end) and _after_open(loop, at):
            return True
        at = loop.find(index, end)
    return False


def _after_open(text: str, start: int) -> bool:
    """The token before ``start`` (spaces, line breaks, `\\` and opening parentheses skipped) may be
    ``[``, ``,`` or ``:``."""
    i = start - 1
    crossed = False
    while i >= 0 and text[i] in " \t\f\\(\r\n":
        crossed = crossed or text[i] in "\r\n"
        i -= 1
    if i >= 0 and text[i] in "[,:":
        return True
    return crossed and "#" in text[text.rfind("\n", 0, i) + 1:i + 1]


def _bracket_change(code: str) -> int:
    return code.count("(") + code.count("[") + code.count("{") - code.count(")") - code.count("]") - code.count("}")


def _statement_lines(body: str):
    """The lines of ``body`` (comments and one-line strings left out) that start a statement: not inside
    brackets opened on an earlier line, nor after a ``\\`` continuation."""
    depth, continued = 0, False
    for line in body.split("\n"):
        code = _STRING_OR_COMMENT_TEXT.sub("", line)
        if not code.strip():
            continue
        if depth <= 0 and not continued:
            yield code
        depth = max(0, depth + _bracket_change(code))
        continued = code.rstrip().endswith("\\")


def _text_may_be_map(loop: str) -> bool:
    """Text test for the checker's body rules: no statement but simple ones after the header, and no call
    except the known tensor ops and `append` (comments and one-line strings left out)."""
    body = _STRING_OR_COMMENT_TEXT.sub("", loop.split("\n", 1)[1] if "\n" in loop else loop)
    if any(_STATEMENT_KEYWORD_TEXT.match("\n" + line) for line in _statement_lines(body)):
        return False
    allowed = _TENSOR_METHODS | _FUNCTIONAL | {"append"} | _KEYWORDS
    return all(name in allowed for name in _CALLED_NAME_TEXT.findall(body))


def _loop_text(text: str, match: "re.Match[str]") -> str:
    """The loop's text from its header to the first line indented no deeper than the `for` that starts a
    statement (a line inside brackets, after a `\\` continuation or starting with a closing bracket
    continues one, not the end)."""
    line_start = text.rfind("\n", 0, match.start()) + 1
    indent = len(text[line_start:match.start()]) - len(text[line_start:match.start()].lstrip())
    end = text.find("\n", match.end())
    header = _STRING_OR_COMMENT_TEXT.sub("", text[match.start(): end if end != -1 else len(text)])
    depth, continued = max(0, _bracket_change(header)), header.rstrip().endswith("\\")
    while end != -1:
        next_end = text.find("\n", end + 1)
        line = text[end + 1: next_end if next_end != -1 else len(text)]
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            end = next_end
            continue
        if depth <= 0 and not continued and len(line) - len(stripped) <= indent and stripped[0] not in ")]}":
            return text[match.end(): end]
        code = _STRING_OR_COMMENT_TEXT.sub("", line)
        depth = max(0, depth + _bracket_change(code))
        continued = code.rstrip().endswith("\\")
        end = next_end
    return text[match.end():]


def _fills_tensor(a: FileAnalysis, loop: cst.For, body: _Body) -> bool:
    """The loop fills a tensor made by a torch factory, or appends to a list later given to `torch.stack`/`cat`."""
    scope = a.scope_of(loop)
    for name in body.written:
        value = a.single_value(name, scope)
        if isinstance(value, cst.Call) and _TENSOR_FACTORIES.match(a.qualified_name(value.func) or ""):
            return True
    for call in a.calls_in(scope):
        if a.qualified_name(call.func) in ("torch.stack", "torch.cat") and call.args and a.comes_before(loop, call):
            if isinstance(call.args[0].value, cst.Name) and call.args[0].value.value in body.appended:
                return True
    return False


def _outer_loops(a: FileAnalysis, loop: LoopInfo) -> List[LoopInfo]:
    found = []
    outer = loop.parent
    while outer is not None:
        found.append(outer)
        outer = outer.parent
    return found


def _range_over_tensor(a: FileAnalysis, expr: cst.BaseExpression) -> Optional[str]:
    """For `range(x.shape[0])`, `range(x.size(0))`, `range(len(x))` (also `range(0, ...)`, or `range(n)` with
    `n` bound once to one of those): the tensor's written name, or "?" where it is an expression; None for
    any other iterable."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "range"):
        return None
    if any(arg.keyword is not None or arg.star for arg in expr.args):
        return None
    args = list(expr.args)
    if len(args) == 2 and isinstance(args[0].value, cst.Integer) and args[0].value.value == "0":
        args = args[1:]
    if len(args) != 1:
        return None
    bound = args[0].value
    if isinstance(bound, cst.Name):
        value = a.single_value(bound.value, a.scope_of(bound))
        bound = value if value is not None else bound
    owner: Optional[cst.BaseExpression] = None
    if isinstance(bound, cst.Call) and isinstance(bound.func, cst.Name) and bound.func.value == "len" and len(bound.args) == 1:
        owner = bound.args[0].value
    elif isinstance(bound, cst.Call) and call_name(bound) == "size" and len(bound.args) == 1:
        owner = receiver(bound)
    elif (isinstance(bound, cst.Subscript) and isinstance(bound.value, cst.Attribute)
          and bound.value.attr.value == "shape"):
        owner = bound.value.value
    if owner is None:
        return None
    return (dotted_name(owner) or "?") + (_VIA_LEN if isinstance(bound, cst.Call) and call_name(bound) == "len" else "")


def _read_body(a: FileAnalysis, loop: cst.For, index: str) -> Optional[_Body]:
    """Check that the body is a map over `index`: simple statements, known ops, no carried state."""
    if loop.orelse is not None or not isinstance(loop.body, cst.IndentedBlock):
        return None
    body = _Body(index)
    lines = loop.body.body
    if not all(isinstance(line, cst.SimpleStatementLine) for line in lines):
        body.stop("control flow")
        return body
    smalls = [small for line in lines for small in line.body]  # type: ignore[union-attr]
    # Names the body binds: read before their binding in an iteration, they carry the last iteration's value.
    bound = {name for small in smalls if isinstance(small, (cst.Assign, cst.AugAssign))
             for target in (small.targets if isinstance(small, cst.Assign) else [small])
             for name in target_names(target.target) if isinstance(target.target, (cst.Name, cst.Tuple))}
    body.written = {target.value.value for small in smalls if isinstance(small, (cst.Assign, cst.AugAssign))
                    for target in ([t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target])
                    if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name)}
    assigned: Set[str] = {index}
    for small in smalls:
        if isinstance(small, cst.Assign):
            _read_expression(a, small.value, body, assigned, bound)
            for target in small.targets:
                _read_target(target.target, body, assigned)
        elif isinstance(small, cst.AugAssign):
            if not isinstance(small.target, cst.Subscript):
                body.stop("an accumulator carries state between iterations")
            _read_expression(a, small.value, body, assigned, bound)
            _read_target(small.target, body, assigned)
        elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and call_name(small.value) == "append":
            owner = receiver(small.value)
            if not isinstance(owner, cst.Name) or len(small.value.args) != 1:
                body.stop("an append to something other than a list name")
                continue
            _read_expression(a, small.value.args[0].value, body, assigned, bound)
            body.appended.add(owner.value)
        else:
            body.stop("a statement other than an assignment or an append")
    if body.appended & (body.indexed | body.written):
        body.stop("a list that is also indexed")
    return body


def _read_target(target: cst.BaseExpression, body: _Body, assigned: Set[str]) -> None:
    if isinstance(target, cst.Name):
        assigned.add(target.value)  # a temporary of this iteration
    elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and _is_plain_index(target, body.index):
        body.written.add(target.value.value)
        body.indexed.add(target.value.value)
    else:
        body.stop("a write to something other than a name or the loop variable's element")


def _read_expression(a: FileAnalysis, expr: cst.BaseExpression, body: _Body, assigned: Set[str], bound: Set[str]) -> None:
    for node in walk(expr):
        if isinstance(node, (cst.Lambda, cst.ListComp, cst.GeneratorExp, cst.DictComp, cst.SetComp, cst.Await,
                             cst.NamedExpr, cst.Yield)):
            body.stop("a nested scope or an expression with effects")
            return
        if isinstance(node, cst.Call) and not _known_call(a, node):
            body.stop(f"a call to `{a.module.code_for_node(node.func)}`")
            return
        if isinstance(node, cst.Subscript) and _mentions(_slice_elements(node), body.index):
            owner = dotted_name(node.value)
            if owner is None:
                continue
            if owner in body.written and not _is_plain_index(node, body.index):
                body.stop("reads another iteration's element")
                return
            if _is_gather_index(node, body.index):
                body.gathers = True
            elif not _is_plain_index(node, body.index):
                body.stop("an index computed from the loop variable (a neighbour or a shifted element)")
                return
            body.indexed.add(owner)
        if isinstance(node, cst.Name) and _is_read(a, node):
            if node.value in bound and node.value not in assigned:
                body.stop(f"`{node.value}` carries a value between iterations")
                return
            if node.value in body.written | body.appended and not _is_subscripted(a, node):
                body.stop("uses the whole tensor it is filling")
                return


def _is_read(a: FileAnalysis, name: cst.Name) -> bool:
    """A name in an expression that is a variable read, not an attribute's or a keyword's name."""
    parent = a.parent(name)
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    return not (isinstance(parent, cst.Arg) and parent.keyword is name)


def _is_subscripted(a: FileAnalysis, name: cst.Name) -> bool:
    parent = a.parent(name)
    return isinstance(parent, cst.Subscript) and parent.value is name


def _known_call(a: FileAnalysis, call: cst.Call) -> bool:
    qualified = a.qualified_name(call.func) or ""
    name = call_name(call)
    if qualified.startswith("torch.nn.functional."):
        return name in _FUNCTIONAL
    if qualified.startswith("torch.") and qualified.count(".") == 1:
        return name in _TORCH_FUNCS
    if isinstance(call.func, cst.Attribute) and not qualified:
        return name in _TENSOR_METHODS
    return False


def _slice_elements(subscript: cst.Subscript) -> List[cst.BaseExpression]:
    out = []
    for element in subscript.slice:
        if isinstance(element.slice, cst.Index):
            out.append(element.slice.value)
        else:
            out.append(element.slice)  # a cst.Slice
    return out


def _mentions(slices, index: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == index for element in slices for n in walk(element))


def _is_plain_index(subscript: cst.Subscript, index: str) -> bool:
    """`x[i]`, `x[i, 2]`, `x[:, i]`: the loop variable alone in one position, nowhere else."""
    elements = _slice_elements(subscript)
    plain = [e for e in elements if isinstance(e, cst.Name) and e.value == index]
    others = [e for e in elements if not (isinstance(e, cst.Name) and e.value == index)]
    return len(plain) == 1 and not any(isinstance(n, cst.Name) and n.value == index for e in others for n in walk(e))


def _is_gather_index(subscript: cst.Subscript, index: str) -> bool:
    """`x[idx[i]]`, `x[i, labels[i]]`: positions are the loop variable or a tensor indexed by it."""
    elements = _slice_elements(subscript)
    gathered = False
    for element in elements:
        if isinstance(element, cst.Name) and element.value == index:
            continue
        if (isinstance(element, cst.Subscript) and isinstance(element.value, (cst.Name, cst.Attribute))
                and _is_plain_index(element, index) and len(element.slice) == 1):
            gathered = True
            continue
        if any(isinstance(n, cst.Name) and n.value == index for n in walk(element)):
            return False
    return gathered


def _vectorized_hint(a: FileAnalysis, loop: cst.For, body: _Body) -> str:
    index = body.index
    count = _count_text(a, loop)
    lines = loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ()
    if len(lines) == 1 and isinstance(lines[0], cst.SimpleStatementLine) and len(lines[0].body) == 1:
        small = lines[0].body[0]
        if (isinstance(small, cst.Assign) and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Subscript)
                and _first_index_only(small.targets[0].target, index)):
            value = _vectorize(small.value, index, count)
            if value is not None:
                name = a.module.code_for_node(small.targets[0].target.value)
                kind = "gathers by an index tensor" if body.gathers else "is elementwise in `" + index + "`"
                return f"the body {kind}: one expression does it (`{name} = {value}`, shapes permitting)"
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and small.value.args:
            value = _vectorize(small.value.args[0].value, index, count)
            if value is not None:
                return (f"the body maps each element: compute `{value}` once for the whole dimension instead of "
                        f"appending per element and stacking (shapes permitting)")
    if any(isinstance(n, cst.Call) and call_name(n) not in _ELEMENTWISE for n in walk(loop.body)):
        return ("the body reduces or reshapes each element: the same ops over the whole tensor with their `dim=` "
                "shifted by one, or `torch.vmap`, do it in one call")
    if body.gathers:
        return "it gathers by an index tensor: index with whole tensors instead (`x[idx[i]]` -> `x[idx]`)"
    return "the body is elementwise in the loop variable: write it as whole-tensor operations, or use `torch.vmap`"


def _count_text(a: FileAnalysis, loop: cst.For) -> str:
    """The loop's length as written: `labels.size(0)` for `range(labels.size(0))`."""
    args = loop.iter.args if isinstance(loop.iter, cst.Call) else ()
    return a.module.code_for_node(args[-1].value) if args else "n"


def _first_index_only(subscript: cst.Subscript, index: str) -> bool:
    elements = _slice_elements(subscript)
    return len(elements) == 1 and isinstance(elements[0], cst.Name) and elements[0].value == index


def _vectorize(expr: cst.BaseExpression, index: str, count: str) -> Optional[str]:
    """The expression over the whole dimension: `x[i]` -> `x`, `x[i, 2]` -> `x[:, 2]`, `w[y[i]]` -> `w[y]`,
    `x[i, y[i]]` -> `x[torch.arange(n), y]`; None where some use of the loop variable has no such form."""

    if any(isinstance(n, cst.Call) and call_name(n) not in _ELEMENTWISE for n in walk(expr)):
        return None

    class _Whole(cst.CSTTransformer):
        failed = False

        def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
            elements = _slice_elements(original)
            if not _mentions(elements, index):
                return updated
            if _first_index_only(original, index):
                return updated.value
            gathers = any(not (isinstance(e, cst.Name) and e.value == index) and _mentions([e], index)
                          for e in elements)
            parts = []
            for element, new in zip(original.slice, updated.slice):
                value = element.slice.value if isinstance(element.slice, cst.Index) else None
                if isinstance(value, cst.Name) and value.value == index:
                    parts.append(f"torch.arange({count})" if gathers else ":")
                elif value is not None and _mentions([value], index):
                    if not isinstance(new.slice, cst.Index) or _mentions([new.slice.value], index):
                        self.failed = True
                        return updated
                    parts.append(cst.Module([]).code_for_node(new.slice.value))
                else:
                    parts.append(cst.Module([]).code_for_node(element.slice))
            return cst.parse_expression(f"{cst.Module([]).code_for_node(updated.value)}[{', '.join(parts)}]")

    transformer = _Whole()
    new = expr.visit(transformer)
    if transformer.failed:
        return None
    text = cst.Module([]).code_for_node(new)
    return None if re.search(rf"\b{re.escape(index)}\b", text) else text
