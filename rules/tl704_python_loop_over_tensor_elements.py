"""TL704: a Python loop over a tensor's indices doing elementwise tensor arithmetic."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Set, Tuple

from torchlint.facts.index import (
    AstIndex, AstLoopInfo, StatementCode, call_arguments, call_name, dotted_name, target_names,
)
from torchlint.config import Settings
from torchlint.facts.script import training_loop_around
from torchlint.rule import FixAvailability, IndexContext, Rule
from torchlint.facts.text_gates import (CALL_GAP, GAP, call_text, finditer_word, has_method_call, search_method,
                                      search_word, with_newline_ends)

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
_CONTEXT_FUNCTIONS = re.compile(r"^(forward|training_step|train_step|train_one_step|compute_loss)$")
_STEP_FUNCTIONS = ("training_step", "train_step", "train_one_step")
# The header of every reported loop, however spaced: `for i in range(` and a length (`len(`, `.shape[`,
# `.size(`, a name), with `(`s and a `0,` start allowed (searched with `finditer_word`).
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
# What `_read_expression` never reads through: a scope of its own or an expression with effects.
_NESTED_OR_EFFECTS = (ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp, ast.Await,
                      ast.NamedExpr, ast.Yield, ast.YieldFrom)


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

    # The text gate: what every finding's file holds, however spaced (torchlint.facts.text_gates): `range`, a
    # length (`.shape`, `.size(`, `len(`) and a context (a forward method's or training step's `def`, a
    # training loop's `backward` or `.step(`). Literal-first searches, rarest and cheapest first.
    text_gate = (("range",), ("shape", "len", "size"), ("backward", "step", "def"))
    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        if "range" not in text:
            return False
        if not (".shape" in text or "len(" in text or has_method_call(text, "size") or search_word(_LEN_TEXT, text)
                or ("shape" in text and search_method(_SHAPE_TEXT, text))):
            return False
        if not ("backward" in text or has_method_call(text, "step") or _CONTEXT_DEF_TEXT.search(text) is not None):
            return False
        return next(finditer_word(_FOR_RANGE_TEXT, with_newline_ends(text)), None) is not None

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if "range" not in index.calls_by_name:
            return
        for loop in index.loops:
            node = loop.node
            if type(node) is not ast.For or not isinstance(node.target, ast.Name):
                continue  # `async for` too: its iterations are no elements
            length = _range_over_tensor(index, node)
            if length is None or not _in_step_or_forward(index, loop):
                continue
            body = _read_body(index, node, node.target.id)
            if body is None or not body.ok or not body.indexed:
                continue
            owner = length[: -len(_VIA_LEN)] if length.endswith(_VIA_LEN) else length
            if owner != "?" and owner not in body.indexed:
                continue  # `range(len(a))` while indexing other things: the length is not the looped tensor's
            if length.endswith(_VIA_LEN) and not _fills_tensor(index, node, body):
                continue  # `len(feats)` of a list of feature maps of different shapes is no tensor dimension
            ctx.report(node, message=_message(index, node, body))


def _message(index: AstIndex, node: ast.For, body: _Body) -> str:
    bound = index.code_for_node(node.iter, node)
    head = (f"Python loop `for {body.index} in {bound}` over a tensor's elements: each op in the body is one "
            f"kernel launch per element")
    return f"{head}; {_vectorized_hint(index, node, body)}"


def _in_step_or_forward(index: AstIndex, loop: AstLoopInfo) -> bool:
    """In a method named like `forward` (a def nested in one counts), a `training_step`-style function, or
    a loop that runs a training step."""
    function = loop.function
    if function is not None and type(function) is not ast.Lambda:
        if _CONTEXT_FUNCTIONS.match(function.name) and index.class_of.get(function) is not None:
            return True
        if function.name in _STEP_FUNCTIONS:
            return True
    return training_loop_around(index, loop.node) is not None


def _unstarred(element: ast.AST) -> ast.AST:
    """A subscript element's value, as LibCST's ``Index.value``: `a` for `*a`."""
    return element.value if isinstance(element, ast.Starred) else element


def _receiver(call: ast.Call) -> Optional[ast.AST]:
    """``x`` in ``x.method(...)``."""
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def _fills_tensor(index: AstIndex, loop: ast.For, body: _Body) -> bool:
    """The loop fills a tensor made by a torch factory, or appends to a list later given to `torch.stack`/`cat`."""
    scope = index.scope_of(loop)
    for name in body.written:
        value = index.single_value(name, scope)
        if isinstance(value, ast.Call) and _TENSOR_FACTORIES.match(index.qualified_name(value.func) or ""):
            return True
    after = (loop.lineno, loop.col_offset)
    for info in index.calls if scope is index.tree else index.calls_in(scope):
        call = info.node
        arguments = call_arguments(call) if index.qualified_name(call.func) in ("torch.stack", "torch.cat") else ()
        if arguments and (call.lineno, call.col_offset) > after:
            first = arguments[0][1]
            if isinstance(first, ast.Name) and first.id in body.appended:
                return True
    return False


def _range_over_tensor(index: AstIndex, loop: ast.For) -> Optional[str]:
    """For `range(x.shape[0])`, `range(x.size(0))`, `range(len(x))` (also `range(0, ...)`, or `range(n)` with
    `n` bound once to one of those): the tensor's written name, or "?" where it is an expression; None for
    any other iterable."""
    expr = loop.iter
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "range"):
        return None
    if expr.keywords or any(isinstance(arg, ast.Starred) for arg in expr.args):
        return None
    args = list(expr.args)
    if len(args) == 2 and _is_zero(args[0]):
        args = args[1:]
    if len(args) != 1:
        return None
    bound = args[0]
    if isinstance(bound, ast.Name):
        value = index.single_value(bound.id, index.scope_of(loop))
        bound = value if value is not None else bound
    owner: Optional[ast.AST] = None
    if isinstance(bound, ast.Call) and len(call_arguments(bound)) == 1:
        if isinstance(bound.func, ast.Name) and bound.func.id == "len":
            owner = call_arguments(bound)[0][1]
        elif call_name(bound) == "size":
            owner = _receiver(bound)
    elif (isinstance(bound, ast.Subscript) and isinstance(bound.value, ast.Attribute)
          and bound.value.attr == "shape"):
        owner = bound.value.value
    if owner is None:
        return None
    return (dotted_name(owner) or "?") + (_VIA_LEN if isinstance(bound, ast.Call) and call_name(bound) == "len" else "")


def _is_zero(node: ast.AST) -> bool:
    """The literal `0` as written (not `00`, `0x0` or `False`)."""
    return (type(node) is ast.Constant and type(node.value) is int and node.value == 0
            and node.lineno == node.end_lineno and node.end_col_offset - node.col_offset == 1)  # type: ignore[operator]


def _read_body(index: AstIndex, loop: ast.For, name: str) -> Optional[_Body]:
    """Check that the body is a map over `name`: simple statements, known ops, no carried state."""
    if loop.orelse or index.body_on_header_line(loop):
        return None  # an `else`, or a body on the header's line
    body = _Body(name)
    statements = loop.body
    # Names the body binds: read before their binding in an iteration, they carry the last iteration's value.
    bound = {bound_name for small in statements if isinstance(small, (ast.Assign, ast.AugAssign))
             for target in (small.targets if isinstance(small, ast.Assign) else [small.target])
             if isinstance(target, (ast.Name, ast.Tuple)) for bound_name in target_names(target)}
    body.written = {target.value.id for small in statements if isinstance(small, (ast.Assign, ast.AugAssign))
                    for target in (small.targets if isinstance(small, ast.Assign) else [small.target])
                    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)}
    assigned: Set[str] = {name}
    for small in statements:
        if isinstance(small, ast.Assign):
            _read_expression(index, small.value, body, assigned, bound)
            for target in small.targets:
                _read_target(index, target, body, assigned)
        elif isinstance(small, ast.AugAssign):
            if not isinstance(small.target, ast.Subscript):
                body.stop("an accumulator carries state between iterations")
            _read_expression(index, small.value, body, assigned, bound)
            _read_target(index, small.target, body, assigned)
        elif isinstance(small, ast.Expr) and isinstance(small.value, ast.Call) and call_name(small.value) == "append":
            owner, arguments = _receiver(small.value), call_arguments(small.value)
            if not isinstance(owner, ast.Name) or len(arguments) != 1:
                body.stop("an append to something other than a list name")
                continue
            _read_expression(index, arguments[0][1], body, assigned, bound)
            body.appended.add(owner.id)
        else:
            body.stop("control flow, or a statement other than an assignment or an append")
    if body.appended & (body.indexed | body.written):
        body.stop("a list that is also indexed")
    return body


def _read_target(index: AstIndex, target: ast.AST, body: _Body, assigned: Set[str]) -> None:
    if isinstance(target, ast.Name):
        assigned.add(target.id)  # a temporary of this iteration
    elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
          and _is_plain_index(index, target, body.index)):
        body.written.add(target.value.id)
        body.indexed.add(target.value.id)
    else:
        body.stop("a write to something other than a name or the loop variable's element")


def _with_parents(root: ast.AST) -> Iterator[Tuple[ast.AST, Optional[ast.AST]]]:
    """Every node under ``root`` (itself included) with its parent: the index keeps none for names."""
    stack: List[Tuple[ast.AST, Optional[ast.AST]]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        stack.extend((child, node) for child in ast.iter_child_nodes(node))


def _read_expression(index: AstIndex, expr: ast.AST, body: _Body, assigned: Set[str], bound: Set[str]) -> None:
    for node, parent in _with_parents(expr):
        if isinstance(node, _NESTED_OR_EFFECTS):
            body.stop("a nested scope or an expression with effects")
            return
        if isinstance(node, ast.Call) and not _known_call(index, node):
            body.stop(f"a call to `{dotted_name(node.func) or 'an expression'}`")
            return
        if isinstance(node, ast.Subscript) and _mentions(_slice_elements(index, node), body.index):
            owner = dotted_name(node.value)
            if owner is None:
                continue
            if owner in body.written and not _is_plain_index(index, node, body.index):
                body.stop("reads another iteration's element")
                return
            if _is_gather_index(index, node, body.index):
                body.gathers = True
            elif not _is_plain_index(index, node, body.index):
                body.stop("an index computed from the loop variable (a neighbour or a shifted element)")
                return
            body.indexed.add(owner)
        if isinstance(node, ast.Name):  # a variable read (attribute and keyword names are no Name in `ast`)
            if node.id in bound and node.id not in assigned:
                body.stop(f"`{node.id}` carries a value between iterations")
                return
            subscripted = isinstance(parent, ast.Subscript) and parent.value is node
            if node.id in body.written | body.appended and not subscripted:
                body.stop("uses the whole tensor it is filling")
                return


def _known_call(index: AstIndex, call: ast.Call) -> bool:
    qualified = index.qualified_name(call.func) or ""
    name = call_name(call)
    if qualified.startswith("torch.nn.functional."):
        return name in _FUNCTIONAL
    if qualified.startswith("torch.") and qualified.count(".") == 1:
        return name in _TORCH_FUNCS
    if isinstance(call.func, ast.Attribute) and not qualified:
        return name in _TENSOR_METHODS
    return False


def _elements(index: AstIndex, subscript: ast.Subscript) -> List[ast.AST]:
    """The subscript's elements as LibCST lists them: `x[a, b]` two, `x[(a, b)]` one (a `*a` as itself)."""
    inside = subscript.slice
    if isinstance(inside, ast.Tuple) and not index.has_own_brackets(inside):
        return list(inside.elts)
    return [inside]


def _slice_elements(index: AstIndex, subscript: ast.Subscript) -> List[ast.AST]:
    """The elements' values (a `*a`'s is `a`); slices as they are."""
    return [_unstarred(element) for element in _elements(index, subscript)]


def _mentions(nodes: Sequence[ast.AST], name: str) -> bool:
    """``name`` written anywhere in ``nodes``, as a variable, an attribute, a keyword or a parameter (the
    names LibCST holds as ``Name`` nodes)."""
    for root in nodes:
        for node in ast.walk(root):
            kind = type(node)
            if ((kind is ast.Name and node.id == name) or (kind is ast.Attribute and node.attr == name)
                    or ((kind is ast.keyword or kind is ast.arg) and node.arg == name)):
                return True
    return False


def _is_index(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_plain_index(index: AstIndex, subscript: ast.Subscript, name: str) -> bool:
    """`x[i]`, `x[i, 2]`, `x[:, i]`: the loop variable alone in one position, nowhere else."""
    elements = _slice_elements(index, subscript)
    plain = [e for e in elements if _is_index(e, name)]
    return len(plain) == 1 and not _mentions([e for e in elements if not _is_index(e, name)], name)


def _is_gather_index(index: AstIndex, subscript: ast.Subscript, name: str) -> bool:
    """`x[idx[i]]`, `x[i, labels[i]]`: positions are the loop variable or a tensor indexed by it."""
    gathered = False
    for element in _slice_elements(index, subscript):
        if _is_index(element, name):
            continue
        if (isinstance(element, ast.Subscript) and isinstance(element.value, (ast.Name, ast.Attribute))
                and _is_plain_index(index, element, name) and len(_elements(index, element)) == 1):
            gathered = True
            continue
        if _mentions([element], name):
            return False
    return gathered


def _first_index_only(index: AstIndex, subscript: ast.Subscript, name: str) -> bool:
    elements = _slice_elements(index, subscript)
    return len(elements) == 1 and _is_index(elements[0], name)


def _vectorized_hint(index: AstIndex, loop: ast.For, body: _Body) -> str:
    name = body.index
    # the loop's length as written (`labels.size(0)` for `range(labels.size(0))`), as a new expression's
    # part: its line breaks in brackets are "\n"
    count = index.code_for_node(loop.iter.args[-1], loop, newline="\n") if isinstance(loop.iter, ast.Call) else "n"
    if len(loop.body) == 1:
        small = loop.body[0]
        if (isinstance(small, ast.Assign) and len(small.targets) == 1 and isinstance(small.targets[0], ast.Subscript)
                and _first_index_only(index, small.targets[0], name)):
            value = _vectorize(index, small, small.value, name, count)
            if value is not None:
                filled = index.code_for_node(small.targets[0].value, small)
                kind = "gathers by an index tensor" if body.gathers else "is elementwise in `" + name + "`"
                return f"the body {kind}: one expression does it (`{filled} = {value}`, shapes permitting)"
        if isinstance(small, ast.Expr) and isinstance(small.value, ast.Call) and call_arguments(small.value):
            value = _vectorize(index, small, call_arguments(small.value)[0][1], name, count)
            if value is not None:
                return (f"the body maps each element: compute `{value}` once for the whole dimension instead of "
                        f"appending per element and stacking (shapes permitting)")
    if any(call_name(info.node) not in _ELEMENTWISE for statement in loop.body for info in index.calls_in(statement)):
        return ("the body reduces or reshapes each element: the same ops over the whole tensor with their `dim=` "
                "shifted by one, or `torch.vmap`, do it in one call")
    if body.gathers:
        return "it gathers by an index tensor: index with whole tensors instead (`x[idx[i]]` -> `x[idx]`)"
    return "the body is elementwise in the loop variable: write it as whole-tensor operations, or use `torch.vmap`"


class _NoWholeForm(Exception):
    """Some use of the loop variable has no whole-dimension form."""


def _vectorize(index: AstIndex, statement: ast.stmt, expr: ast.AST, name: str, count: str) -> Optional[str]:
    """The expression over the whole dimension: `x[i]` -> `x`, `x[i, 2]` -> `x[:, 2]`, `w[y[i]]` -> `w[y]`,
    `x[i, y[i]]` -> `x[torch.arange(n), y]`; None where some use of the loop variable has no such form. The
    text is LibCST's for the rewritten expression (`StatementCode`): what is not rewritten stays as written."""
    if any(call_name(info.node) not in _ELEMENTWISE for info in index.calls_in(expr)):
        return None
    code = index.statement_code(statement)
    try:
        text = _whole(index, code, expr, name, count)
    except _NoWholeForm:
        return None
    return None if re.search(rf"\b{re.escape(name)}\b", text) else text


def _rewritten(index: AstIndex, node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Subscript) and _mentions(_slice_elements(index, node), name)


def _whole(index: AstIndex, code: StatementCode, node: ast.AST, name: str, count: str) -> str:
    """``node``'s text over the whole dimension: a subscript by the loop variable rewritten (without its
    parentheses), anything else as written with the subscripts inside it rewritten."""
    if _rewritten(index, node, name):
        return _whole_subscript(index, code, node, name, count)  # type: ignore[arg-type]
    inner, stack = [], list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if _rewritten(index, child, name):
            inner.append((*code.place(child), _whole_subscript(index, code, child, name, count)))  # type: ignore[arg-type]
        else:
            stack.extend(ast.iter_child_nodes(child))
    return code.text(*code.place(node), newline="\n", replacements=inner)


def _whole_subscript(index: AstIndex, code: StatementCode, subscript: ast.Subscript, name: str, count: str) -> str:
    if _first_index_only(index, subscript, name):
        return _whole(index, code, subscript.value, name, count)
    elements = _elements(index, subscript)
    gathers = any(not _is_index(_unstarred(e), name) and _mentions([_unstarred(e)], name) for e in elements)
    parts = []
    for element in elements:
        value = None if isinstance(element, ast.Slice) else _unstarred(element)
        if value is not None and _is_index(value, name):
            parts.append(f"torch.arange({count})" if gathers else ":")
        elif value is not None and _mentions([value], name):
            part = _whole(index, code, value, name, count)
            if _text_mentions(part, name):
                raise _NoWholeForm
            parts.append(part)
        else:
            parts.append(code.text(*code.place(element), newline="\n"))
    return f"{_whole(index, code, subscript.value, name, count)}[{', '.join(parts)}]"


def _text_mentions(text: str, name: str) -> bool:
    """``_mentions`` for an expression's text."""
    try:
        return _mentions([ast.parse(f"(\n{text}\n)", mode="eval")], name)
    except SyntaxError:
        return re.search(rf"\b{re.escape(name)}\b", text) is not None
