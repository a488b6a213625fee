"""TL708: code that torch.compile compiles does what Dynamo cannot trace: a graph break, or a recompile."""

from __future__ import annotations

import ast
from typing import Optional, Set

from torchlint.facts.index import AstIndex, call_name, dotted_name, keyword_value, walk
from torchlint.facts.compiled import COMPILE, Def, compiled_functions, dynamo_setting
from torchlint.rule import IndexContext, Rule, line_reference

_BREAK = "{what} in code that `torch.compile` compiles ({site}) is a graph break: {why}; {instead}"
_SCALAR = ("the graph ends there and the rest runs as another graph, with the value copied to the host between "
           "them")
_ITEM = ("keep the value a tensor (or read it after the compiled call); "
         "`torch._dynamo.config.capture_scalar_outputs = True` traces it instead")
_TOLIST = "keep it a tensor, or read it after the compiled call"
_PRINT = ("Dynamo does not trace `print`, so the graph is split around it", "print after the compiled call "
          "(or add `print` to `torch._dynamo.config.reorderable_logging_functions`)")
_IO = ("Dynamo does not trace file I/O, so the graph is split around it", "read and write files outside the "
       "compiled code")
_BRANCH = ("Dynamo cannot trace control flow that depends on a tensor's value, so it splits the graph to "
           "run the test in Python", "compute both sides and select with `torch.where(condition, a, b)`, or use "
           "`torch.cond`")
_GENERATOR = ("`torch.compile` of a generator function compiles nothing: Dynamo does not trace generators and "
              "runs it eagerly ({site}); compile a plain function that the generator calls")
_LEARNING_RATE = ("`{optimizer}`'s learning rate is a Python float that `{scheduler}.step()` changes every "
                  "step, and the compiled `{step}` ({site}) is specialised on it: each new value recompiles it; "
                  "pass the rate as a tensor (`lr=torch.tensor({lr})`)")

# Methods whose result is a tensor that an `if` then tests by value (`if mask.any():`, `if x.sum() > 0:`).
_REDUCTIONS = {"any", "all", "sum", "mean", "max", "min", "norm", "amax", "amin", "count_nonzero"}
_TENSOR_TESTS = {"torch.any", "torch.all", "torch.equal", "torch.allclose", "torch.is_nonzero"}
_FILE_IO = {"torch.save", "torch.load"}
# Guards that keep code out of the traced path: `if not torch.compiler.is_compiling(): print(...)`.
_GUARD_NAMES = {"is_compiling", "is_dynamo_compiling", "is_scripting", "is_tracing"}
_OPTIMIZERS = "torch.optim."


class GraphBreakInCompiledCode(Rule):
    """## What it does
    Flags, inside the functions and modules this file compiles, the constructs that `torch.compile`'s
    tracer (Dynamo) cannot put in a graph:

    - `.item()` and `.tolist()` on a tensor;
    - `print(...)` (of anything: a string too);
    - a Python `if` or `while` on a tensor's value: `if x.sum() > 0:`, `if mask.any():`, `if torch.equal(a, b):`;
    - file I/O: `open(...)`, `torch.save(...)`, `torch.load(...)`;
    - `torch.compile` of a generator function (a def with `yield`);
    - and a compiled optimizer step (`torch.compile(optimizer.step)`, or a compiled def that calls it) whose
      learning rate is a Python float that an LR scheduler changes every step: a recompile each step.

    What the file compiles: a def under `@torch.compile` or passed to `torch.compile(fn)`; the `forward` of a
    class defined in the file whose instance is passed to `torch.compile(model)` or compiled with
    `model.compile()`; and what those run in the same file (`self.method(...)`, module-level helpers, the
    `forward` of the submodules the class builds in `__init__`). Silent in defs marked
    `torch.compiler.disable`, under `if not torch.compiler.is_compiling():`, for `print` and file I/O under any
    `if` (debugging paths that usually do not run), and for models defined in another file.

    ## Why is this slow?
    At a graph break Dynamo ends the graph, runs the construct in Python and starts a new graph after it:
    nothing is fused across the break, each graph is a separate launch sequence, and a value read on the host
    (`.item()`, a tensor's truth value) waits for the GPU. A data-dependent branch also guards the graph on the
    branch taken. A recompile costs seconds of compilation each time it happens; a compiled optimizer step
    specialised on a float learning rate recompiles whenever the scheduler changes it (on torch 2.13, a
    `LambdaLR` over 5 steps made 3 graphs with a float rate and 1 with a tensor one), until it hits the
    recompile limit and falls back to eager.

    ## Example
    ```python
    @torch.compile
    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        if loss.isnan().any():
            print("nan loss")
        loss.backward()
        return loss.item()
    ```

    ## Use instead
    ```python
    @torch.compile
    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss.detach()

    loss = train_step(x, y)
    if step % log_every == 0:
        print(loss.item())
    ```
    For the optimizer: `torch.optim.AdamW(params, lr=torch.tensor(1e-3))` keeps the rate in a tensor that the
    scheduler updates in place, and the compiled step compiles once.

    ## Fix safety
    No fix: moving a value read, a print or a branch out of compiled code changes the function's interface.
    The message names the construct and the documented way around it.

    ## PyTorch versions
    `torch.compile` exists since PyTorch 2.0. Checked on 2.13 with `torch._dynamo.explain` (its graph-break
    registry, `torch/_dynamo/graph_break_registry.json`): `.item()` breaks unless
    `torch._dynamo.config.capture_scalar_outputs = True` (GB0124); `.tolist()` breaks (GB0109 for float tensors,
    a data-dependent operator for integer ones); `print` breaks whatever it prints ("Failed to trace builtin
    operator", with `reorderable_logging_functions` as the documented way around); a data-dependent branch
    breaks (GB0170); `open` and `torch.save` are not traced; a generator function passed to `torch.compile`
    is not compiled at all (GB0003). A generator expression inside compiled code is traced (not flagged). A
    tensor learning rate for compiled optimizers is documented since 2.2.
    """

    code = "TL708"
    name = "graph-break-in-compiled-code"
    message = ("code that `torch.compile` compiles does what Dynamo cannot trace: a graph break (or a recompile); "
               "move it out of the compiled code")
    summary = "A graph break (.item(), print, a branch on a tensor, file I/O) or a recompile in compiled code"
    silent_in_test_files = True
    # Every finding is in code that `torch.compile` or `.compile()` compiles: the word is spelled (`compiled`,
    # `_compile` are other words). Written literal-first, the left boundary as a lookbehind: `\bcompile\b`
    # matches the same files, but `re` cannot skip ahead to a pattern that starts with `\b` (0.23 s against
    # 0.01 s over the torch tree's and the corpus's files that hold the substring).
    required_patterns = (r"compile\b(?<!\wcompile)",)
    text_gate = (("compile",),)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        compiled = compiled_functions(index)
        for function, site in compiled.reached.items():
            where = _site(index, site)
            if function in compiled.entries and any(isinstance(n, (ast.Yield, ast.YieldFrom))
                                                    for n in _own_nodes(function)):
                ctx.report(index.definition_name(function), _GENERATOR.format(site=where))
                continue
            self._breaks(ctx, function, where)
        self._learning_rates(ctx, compiled.reached)

    def _breaks(self, ctx: IndexContext, function: Def, where: str) -> None:
        index = ctx.index
        # Set in the file, these options make Dynamo trace the scalar reads, or reorder the prints.
        scalars_traced = dynamo_setting(index, "capture_scalar_outputs")
        prints_reordered = dynamo_setting(index, "reorderable_logging_functions")
        for info in index.calls_in(function):
            call = info.node
            if info.function is not function or _guarded(index, call, function):
                continue
            func = call.func
            name = call_name(call)
            if isinstance(func, ast.Attribute) and name in ("item", "tolist") and not call.args and not call.keywords \
                    and not scalars_traced:
                instead = _ITEM if name == "item" else _TOLIST
                ctx.report(call, _BREAK.format(what=f"`.{name}()`", site=where, why=_SCALAR, instead=instead))
            elif isinstance(func, ast.Name) and name in ("print", "open") and func.id not in index.imports \
                    and not _conditional(index, call, function) and not (name == "print" and prints_reordered):
                why, instead = _PRINT if name == "print" else _IO
                ctx.report(call, _BREAK.format(what=f"`{name}(...)`", site=where, why=why, instead=instead))
            elif index.qualified_name(func) in _FILE_IO and not _conditional(index, call, function):
                ctx.report(call, _BREAK.format(what=f"`{dotted_name(func)}(...)`", site=where, why=_IO[0],
                                               instead=_IO[1]))
        for node in _own_nodes(function):
            if isinstance(node, (ast.If, ast.While)) and _tests_tensor_value(index, node.test) \
                    and not _guarded(index, node, function):
                ctx.report(node.test, _BREAK.format(what=f"a Python `{'if' if isinstance(node, ast.If) else 'while'}` "
                                                    "on a tensor's value", site=where, why=_BRANCH[0],
                                                    instead=_BRANCH[1]))

    def _learning_rates(self, ctx: IndexContext, reached: dict) -> None:
        """Compiled optimizer steps whose float learning rate a scheduler changes every step."""
        index = ctx.index
        # (the call reported, the site that compiles it, the optimizer's `.step` attribute)
        steps = [(call, site, call.func) for function, site in reached.items() for call in
                 (info.node for info in index.calls_in(function) if info.function is function)
                 if index.is_optimizer_step(call, function) and not call.args]
        steps += [(info.node, info.node, info.node.args[0]) for info in index.calls_to(COMPILE)
                  if info.node.args and isinstance(info.node.args[0], ast.Attribute) and info.node.args[0].attr == "step"]
        for call, site, step in steps:
            optimizer = dotted_name(step.value)  # type: ignore[attr-defined]
            made = _optimizer_made(index, optimizer) if optimizer else None
            if made is None:
                continue
            lr = keyword_value(made, "lr") or (made.args[1] if len(made.args) > 1 else None)
            if lr is not None and _is_tensor(index, lr):
                continue
            scheduler = _scheduler_stepped(index, optimizer)  # type: ignore[arg-type]
            if scheduler is None:
                continue
            ctx.report(call, _LEARNING_RATE.format(optimizer=optimizer, scheduler=scheduler, step=f"{optimizer}.step",
                                                   site=_site(index, site), lr=_lr_text(lr)))


def _own_nodes(function: Def):
    """The nodes of ``function``'s body, not those of the defs, lambdas and classes inside it."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _site(index: AstIndex, site: ast.AST) -> str:
    """How the finding's code is compiled, for the message: "`@torch.compile` at line 3"."""
    if any(site in f.decorator_list for f in index.functions):
        text = "@" + index.source_segment(site)
    else:
        statement = next(n for n in index.ancestors(site) if isinstance(n, ast.stmt))
        text = index.code_for_node(site, statement)
    text = " ".join(text.split())
    return f"`{text if len(text) <= 60 else text[:57] + '...'}` at {line_reference(site.lineno)}"  # type: ignore[attr-defined]


def _conditional(index: AstIndex, node: ast.AST, function: Def) -> bool:
    """Under an ``if`` (or a conditional expression) inside ``function``."""
    for ancestor in index.ancestors(node):
        if ancestor is function:
            return False
        if isinstance(ancestor, (ast.If, ast.IfExp)):
            return True
    return False


def _guarded(index: AstIndex, node: ast.AST, function: Def) -> bool:
    """Under an ``if`` that asks whether the code is being compiled, traced or scripted."""
    for ancestor in index.ancestors(node):
        if ancestor is function:
            return False
        if isinstance(ancestor, (ast.If, ast.IfExp)) and any(
                isinstance(n, ast.Attribute) and n.attr in _GUARD_NAMES for n in walk(ancestor.test)):
            return True
    return False


def _tests_tensor_value(index: AstIndex, test: ast.expr) -> bool:
    """``test`` is decided by a tensor's value: a reduction compared or tested (``x.sum() > 0``,
    ``mask.any()``), or ``torch.equal``/``torch.any`` & co. A test with ``.item()`` is left to that finding."""
    operands = [test.operand] if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else \
        list(test.values) if isinstance(test, ast.BoolOp) else [test]
    for operand in operands:
        sides = [operand.left, *operand.comparators] if isinstance(operand, ast.Compare) else [operand]
        for side in sides:
            if not isinstance(side, ast.Call) or any(call_name(n) == "item" for n in walk(side) if isinstance(n, ast.Call)):
                continue
            if index.qualified_name(side.func) in _TENSOR_TESTS:
                return True
            if isinstance(side.func, ast.Attribute) and side.func.attr in _REDUCTIONS and not side.args \
                    and not side.keywords and dotted_name(side.func.value) not in index.imports:
                return True
    return False


def _optimizer_made(index: AstIndex, name: str) -> Optional[ast.Call]:
    """The ``torch.optim.X(...)`` call bound to ``name`` (anywhere in the file, one binding)."""
    made = [info.node for info in index.calls if index.assigned_to.get(info.node) is not None
            and dotted_name(index.assigned_to[info.node]) == name
            and (index.qualified_name(info.node.func) or "").startswith(_OPTIMIZERS)
            and ".lr_scheduler" not in (index.qualified_name(info.node.func) or "")]
    return made[0] if len(made) == 1 else None


def _scheduler_stepped(index: AstIndex, optimizer: str) -> Optional[str]:
    """The name of an LR scheduler built on ``optimizer`` whose ``.step()`` runs in a loop."""
    names: Set[str] = set()
    for info in index.calls:
        qualified = index.qualified_name(info.node.func) or ""
        target = index.assigned_to.get(info.node)
        if ".lr_scheduler." in qualified and target is not None and info.node.args \
                and dotted_name(info.node.args[0]) == optimizer:
            names.add(dotted_name(target) or "")
    for info in index.calls_by_name.get("step", ()):
        owner = dotted_name(info.node.func.value) if isinstance(info.node.func, ast.Attribute) else None
        if owner in names and info.loop is not None:
            return owner
    return None


def _is_tensor(index: AstIndex, expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        value = index.single_value(expr.id, index.scope_of(expr))
        if value is None:
            value = index.single_value(expr.id, index.tree)
        return value is not None and _is_tensor(index, value)
    return isinstance(expr, ast.Call) and (index.qualified_name(expr.func) or "") in ("torch.tensor", "torch.as_tensor",
                                                                                     "torch.full", "torch.scalar_tensor")


def _lr_text(lr: Optional[ast.expr]) -> str:
    if isinstance(lr, ast.Constant) and isinstance(lr.value, (int, float)):
        return repr(lr.value)
    return "lr" if lr is None or not isinstance(lr, ast.Name) else lr.id
