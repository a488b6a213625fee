"""TL202: evaluation code that records autograd graphs nobody will use."""

from __future__ import annotations

import ast
import re
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.analysis import FileAnalysis, FunctionInfo, call_name, dotted_name, is_literal, walk as _walk_nodes
from torchlint.ast_index import AstIndex, index_of
from torchlint.ast_index import call_name as ast_call_name
from torchlint.ast_index import dotted_name as ast_dotted_name
from torchlint.config import Settings
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, Rule, RuleContext
from torchlint.text_prefilter import has_method_call

# Grad-mode context managers that switch recording off.
_NO_GRAD = {
    "torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.inference_mode",
    "torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.inference_mode",
}
_SET_GRAD = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"}
# Anything in this text means the code wants (or manages) gradients: leave it alone.
_GRAD_TEXT = re.compile(
    r"backward|\bautograd\b|requires_grad|enable_grad|set_grad_enabled|retain_grad|zero_grad|\.grad\b"
    r"|\bgrad\s*\(|\bvjp\b|\bjvp\b|\bjacrev\b|\bjacfwd\b|\bhessian\b"
)
# What makes a called helper compute gradients (`_grad_functions`): narrower than `_GRAD_TEXT`, since a helper
# that only makes tensors with `requires_grad=flag` or manages grad mode does not differentiate anything.
_COMPUTES_GRAD_TEXT = re.compile(
    r"backward|\bautograd\b|zero_grad|enable_grad|\.grad\b|\bgrad\s*\(|\bvjp\b|\bjvp\b|\bjacrev\b|\bjacfwd\b"
    r"|\bhessian\b"
)
_GENERATOR_TEXT = re.compile(r"\byield\b")
_NO_GRAD_TEXT = re.compile(r"no_grad|inference_mode|set_grad_enabled\(\s*False")
_AWAIT_TEXT = re.compile(r"\bawait\b")

# Words that make a function an evaluation function (the first or last word of its snake_case name).
_EVAL_WORDS = {"validate", "validation", "evaluate", "evaluation", "eval", "val", "predict", "prediction",
               "predictions", "infer", "inference"}
# Framework hooks run under no_grad by their framework (Lightning, Ignite, HF Trainer), and functions whose
# output is differentiated by their caller.
_FRAMEWORK_NO_GRAD = re.compile(r"^(validation|val|test|predict|prediction)_step(_end)?$|^on_(validation|test|predict)"
                                r"|^(validation|test)_epoch_end$")
_HOOK_NAME = re.compile(r"_step$|^on_|_epoch_end$|^forward$|^__\w+__$|^train|^training|^fit|^compute_loss")
_EVAL_LOADER = re.compile(r"(^|_)(val|valid|validation|test|testing|eval|evaluation|dev|holdout)"
                          r"(?=$|_|\d|loader|dataloader|dl|ds|dataset|data|set|batch)", re.IGNORECASE)
_LOADER = re.compile(r"loader|(^|_)dl($|_)|dataloader|(^|_)ds($|_)|dataset|batches", re.IGNORECASE)
# Pre-filter texts (supersets of what the checker accepts; see `may_fire`).
_EVAL_WORD_TEXT = (r"(?:validate|validation|evaluate|evaluation|eval|val|predict|prediction|predictions|infer"
                   r"|inference)")
# (`\` continuations may stand between `def`, the name and its `(`.)
_EVAL_DEF_TEXT = re.compile(r"def[\s\\]+_*(?:(?i:" + _EVAL_WORD_TEXT + r"|test)(?:_\w*)?|\w+_(?i:" + _EVAL_WORD_TEXT
                            + r"))[\s\\]*\(")
_LOADER_HINTS = ("loader", "dataset", "batches", "dl", "ds")
_EVAL_LOADER_TEXT = re.compile(r"(?:val|valid|validation|test|testing|eval|evaluation|dev|holdout)\w*"
                               r"(?:loader|dl|ds|dataset|batches)")
# The same search, one literal-led pattern per word part: every word above holds `val`, `test`, `dev` or
# `holdout`, and a pattern that starts with a literal is found several times faster by `re` than an alternation.
_EVAL_LOADER_SEARCHES = tuple(re.compile(word + r"\w*(?:loader|dl|ds|dataset|batches)")
                              for word in ("val", "test", "dev", "holdout"))


def _may_name_eval_loader(lower: str) -> bool:
    """``_EVAL_LOADER_TEXT.search(lower)``, faster (``tests/test_rule_tl202.py`` holds them equal)."""
    return any(search.search(lower) for search in _EVAL_LOADER_SEARCHES)
# Names of things that are models: the last part of the called name.
_MODEL_WORDS = {"model", "net", "network", "encoder", "decoder", "backbone", "classifier",
                "generator", "discriminator", "policy", "critic", "actor", "teacher", "student", "autoencoder",
                "vae", "unet", "transformer", "detector", "segmenter", "regressor", "embedder", "ema"}
_NOT_MODEL_FIRST_WORDS = {"build", "create", "get", "make", "load", "init", "save", "setup", "wrap", "compile",
                          "export", "prepare", "import", "to", "is", "has", "count", "num", "print", "log", "add",
                          "check", "register", "set", "convert", "lower", "fuse", "trace", "script", "freeze", "apply",
                          "gen", "new", "default", "instantiate", "construct"}
_CAMEL_MODEL = re.compile(r"^(net|model)[A-Z0-9]\w*$|^[a-z]\w*(Net|Model)$")
_NET_SUFFIX = re.compile(r"^[a-z]+net\d*$")  # resnet, unet, convnet, mobilenet2
_CLASS_NAME = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)*$")  # PEP 8 class names: `Model`, `ResNet18`
_MODEL_FACTORIES = re.compile(r"^(torchvision\.models\.|timm\.create_model$|transformers\.)|\.from_pretrained$")


def looks_like_model(last: str) -> bool:
    """Is a called name (its last part) a model's: `model`, `self.ema_model`, `net_g`, `resnet`, `netG`?"""
    if _CAMEL_MODEL.match(last):
        return True
    words = last.lower().strip("_").split("_")
    if not words or words[0] in _NOT_MODEL_FIRST_WORDS:
        return False
    # `model`, `self.ema_model`, `net_g`, `model2`, `resnet`: the model word ends the name or starts a short one
    words = [w.rstrip("0123456789") for w in words]
    if words == ["module"]:  # DataParallel's `model.module(x)`
        return True
    return (words[-1] in _MODEL_WORDS or (len(words) <= 2 and words[0] in _MODEL_WORDS)
            or bool(_NET_SUFFIX.match(words[-1])))


# --- the ast stage: the checker's candidates on the stdlib ast (a superset of what it reports) ------------
def _ast_may_report(index: AstIndex, text: str) -> bool:
    """False only where ``_Checker`` certainly reports nothing: it mirrors the checker's tests on functions
    and loops, leaving out the ones that only silence (no_grad callers, guards, training callers)."""
    if not index.imports_torch():
        return False
    if _ast_grad_globally_off(index):
        return False
    facts = _AstFacts(index, text)
    own_calls: Dict[ast.AST, List[ast.Call]] = {}
    for info in index.calls:
        own_calls.setdefault(info.function, []).append(info.node)
    for function in index.functions:
        if _ast_function_may_report(facts, function, own_calls.get(function, [])):
            return True
    return any(_ast_loop_may_report(facts, loop) for loop in index.loops)


class _AstFacts:
    """What the ast stage's tests share for one file."""

    def __init__(self, index: AstIndex, text: str) -> None:
        self.index = index
        self.source = text
        self.lines = _LINE_BREAK.split(text)  # lines as ast numbers them, with their line breaks between
        top = [s for s in index.tree.body if isinstance(s, ast.ClassDef)]
        self.top_level_classes = {s.name for s in top}
        self.model_classes: Set[str] = set()
        for statement in top:
            for base in statement.bases:
                qualified = index.qualified_name(base) or ast_dotted_name(base) or ""
                if qualified.endswith("Module") or qualified in self.model_classes:
                    self.model_classes.add(statement.name)
        self.helpers = {f.name for f in index.functions if index.class_of.get(f) is None}
        # `_Checker.run`'s `pytest_file`, from the imports only: the file's name is not known here
        self.pytest_imports = any(v.split(".")[0] in {"pytest", "unittest"} for v in index.imports.values())
        self._guards: Optional[List[Tuple[object, Tuple[int, int], Tuple[int, int]]]] = None
        self._passed_names: Optional[Set[str]] = None

    def guarded(self, node: ast.AST, function) -> bool:
        """``node`` lies in a grad-disabling ``with`` (``_guarding_with``) of ``function``, its own def: a def
        or lambda inside the block starts afresh, as ``_Checker._guarded`` stops at the function."""
        if self._guards is None:
            self._guards = _ast_guarding_spans(self.index)
        start = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return any(owner is function and first <= start and end <= last for owner, first, last in self._guards)

    def passed_names(self) -> Set[str]:
        """Names handed to some call as an argument (``_Checker._only_passed_along``)."""
        if self._passed_names is None:
            self._passed_names = {arg.id for info in self.index.calls for arg in info.node.args if type(arg) is ast.Name}
            self._passed_names.update(k.value.id for info in self.index.calls for k in info.node.keywords
                                      if type(k.value) is ast.Name)
        return self._passed_names

    def text(self, first: int, last: int) -> str:
        return "".join(self.lines[2 * (first - 1): 2 * last])


_LINE_BREAK = re.compile(r"(\r\n|\r|\n)")


def _ast_guarding_spans(index: AstIndex) -> List[Tuple[object, Tuple[int, int], Tuple[int, int]]]:
    """(the def around it or None, start, end) of every grad-disabling ``with``: a walk of statements only."""
    spans = []
    frames: List[Tuple[list, object]] = [(index.tree.body, None)]
    while frames:
        statements, function = frames.pop()
        for node in statements:
            kind = type(node)
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                frames.append((node.body, node))
                continue
            if (kind is ast.With or kind is ast.AsyncWith) and _ast_guarding_with(index, node):
                spans.append((function, (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)))
            for name in ("body", "orelse", "finalbody", "handlers", "cases"):
                inner = getattr(node, name, None)
                if inner and isinstance(inner, list):
                    frames.append((inner, function))
    return spans


def _ast_settled_quietly(facts: _AstFacts, function, cheap: bool) -> bool:
    """``_Checker._check_function`` settles the function (and skips its loops) without a report: no-grad or
    registering decorators, a framework no-grad hook, a test in a pytest file (``cheap``), or a call of it
    under no_grad (the dearer test, asked last)."""
    name = function.name
    if not cheap:
        return bool(facts.index.calls_by_name.get(name)) and _ast_called_under_no_grad(facts, name)
    decorators = [ast_dotted_name(d.func if isinstance(d, ast.Call) else d) or "" for d in function.decorator_list]
    if any("grad" in d or "inference" in d or "register" in d.lower() for d in decorators):
        return True
    if _FRAMEWORK_NO_GRAD.search(name):
        return True
    return facts.pytest_imports and not _HOOK_NAME.search(name) and name.lstrip("_").startswith("test")


def _ast_called_under_no_grad(facts: _AstFacts, name: str) -> bool:
    """Some call of ``name`` sits in a grad-disabling ``with`` (part of ``_Checker._called_without_grad``)."""
    return any(facts.guarded(info.node, info.function) for info in facts.index.calls_by_name.get(name, ()))


def _ast_guarding_with(index: AstIndex, node) -> bool:
    """``_Checker._guarding_with`` (a subset of it where the ast cannot tell: ``mode=False``)."""
    for item in node.items:
        expr = item.context_expr
        if isinstance(expr, (ast.Name, ast.Attribute)):
            return True
        if not isinstance(expr, ast.Call):
            continue
        called = (ast_dotted_name(expr.func) or "").lower()
        if "grad" in called or "inference" in called:
            return True
        qualified = index.qualified_name(expr.func)
        if qualified in _NO_GRAD:
            return True
        if qualified in _SET_GRAD and expr.args and isinstance(expr.args[0], ast.Constant) \
                and expr.args[0].value is False:
            return True
    return False


def _ast_grad_globally_off(index: AstIndex) -> bool:
    """``_Checker._grad_globally_off``: ``torch.set_grad_enabled(False)`` as a module-level statement."""
    for statement in index.tree.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            call = statement.value
            if ast_call_name(call) == "set_grad_enabled" and index.qualified_name(call.func) in _SET_GRAD \
                    and call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False:
                return True
    return False


def _ast_enters_no_grad(facts: _AstFacts, function) -> bool:
    """``stack.enter_context(torch.no_grad())`` in the function (the call's own text, as ``_Checker``)."""
    first, last = function.lineno, function.end_lineno or function.lineno
    for info in facts.index.calls_by_name.get("enter_context", ()):
        call = info.node
        if first <= call.lineno <= last and _NO_GRAD_TEXT.search(ast.get_source_segment(facts.source, call) or ""):
            return True
    return False


def _ast_only_passed_along(facts: _AstFacts, name: str) -> bool:
    """Part of ``_Checker._only_passed_along``: never called in the file, handed to a call as an argument."""
    return not facts.index.calls_by_name.get(name) and name in facts.passed_names()


def _ast_has_params(function) -> bool:
    args = function.args
    return bool(args.posonlyargs or args.args or args.kwonlyargs or args.vararg or args.kwarg)


def _ast_function_may_report(facts: _AstFacts, function, calls: List[ast.Call]) -> bool:
    index = facts.index
    if _ast_settled_quietly(facts, function, cheap=True):
        return False
    name = function.name
    if _HOOK_NAME.search(name):
        return False
    words = name.strip("_").lower().split("_")
    if words[0] == "test" and not _ast_has_params(function):
        return False  # `_Checker`: a pytest test
    receivers: Set[str] = set()
    for call in calls:
        if _ast_train_receiver(index, call):
            return False  # a mixed function
        receiver = _ast_eval_receiver(index, call)
        if receiver:
            receivers.add(receiver)
    named = words[0] in _EVAL_WORDS or words[-1] in _EVAL_WORDS or words[0] == "test"
    eval_loader = any(isinstance(loop.node, (ast.For, ast.AsyncFor)) and loop.function is function
                      and _ast_is_eval_loader(loop.node.iter) for loop in index.loops)
    called = {ast_dotted_name(call.func) for call in calls}
    model_receivers = {r for r in receivers if r == "self" or looks_like_model(r.split(".")[-1]) or r in called}
    if not (model_receivers or eval_loader or (named and index.class_of.get(function) is None)):
        return False
    first = function.decorator_list[0].lineno if function.decorator_list else function.lineno
    if _GRAD_TEXT.search(facts.text(first, function.end_lineno or first)):
        return False
    if any(index.is_optimizer_step(call, function) for call in calls):
        return False
    if _ast_settled_quietly(facts, function, cheap=False):
        return False
    if _ast_enters_no_grad(facts, function) or _ast_only_passed_along(facts, name):
        return False
    return any(_ast_is_model_call(facts, call, receivers, function) and not facts.guarded(call, function)
               for call in calls)


def _ast_loop_may_report(facts: _AstFacts, loop) -> bool:
    index, node = facts.index, loop.node
    if not isinstance(node, ast.For):
        return False
    settled = loop.function is not None and not isinstance(loop.function, ast.Lambda)
    if settled and _ast_settled_quietly(facts, loop.function, cheap=True):
        return False  # `_Checker.run` skips the loops of settled functions
    receivers = _ast_preceding_eval(index, index.block_of.get(node, []), node)
    if receivers is None or (not receivers and not _ast_is_eval_loader(node.iter)):
        return False
    if _GRAD_TEXT.search(facts.text(node.lineno, node.end_lineno or node.lineno)):
        return False
    calls = [info.node for info in index.calls if info.function is loop.function and _runs_in(info.loop, loop)]
    if any(index.is_optimizer_step(call, loop.function) for call in calls):
        return False
    if facts.guarded(node, loop.function):
        return False  # `_Checker._check_loop`: a grad-disabling `with` around the loop
    if settled and _ast_settled_quietly(facts, loop.function, cheap=False):
        return False
    receivers = receivers | {r for r in (_ast_eval_receiver(index, c) for c in calls) if r}
    return any(_ast_is_model_call(facts, call, receivers, loop.function) and not facts.guarded(call, loop.function)
               for call in calls)


def _runs_in(body_loop, loop) -> bool:
    while body_loop is not None:
        if body_loop is loop:
            return True
        body_loop = body_loop.parent
    return False


def _ast_preceding_eval(index: AstIndex, block: List[ast.stmt], loop: ast.For) -> Optional[Set[str]]:
    """``_Checker._preceding_eval``: a statement line at a time, the last line first."""
    position = next((i for i, statement in enumerate(block) if statement is loop), None)
    if position is None:
        return set()
    receivers: Set[str] = set()
    line_groups: List[List[ast.stmt]] = []
    for statement in block[:position]:
        if line_groups and line_groups[-1][0].lineno == statement.lineno:
            line_groups[-1].append(statement)
        else:
            line_groups.append([statement])
    for group in reversed(line_groups):
        for statement in group:
            if isinstance(statement, (ast.Expr, ast.Assign)) and isinstance(statement.value, ast.Call):
                receiver = _ast_eval_receiver(index, statement.value)
                if receiver:
                    receivers.add(receiver)
                elif _ast_train_receiver(index, statement.value):
                    return receivers or None
    return receivers


def _ast_eval_receiver(index: AstIndex, call: ast.Call) -> Optional[str]:
    if not isinstance(call.func, ast.Attribute):
        return None
    attr = call.func.attr
    switched = attr == "eval" and not call.args and not call.keywords
    if attr == "train" and len(call.args) + len(call.keywords) == 1:
        value = call.args[0] if call.args else call.keywords[0].value
        keyword = None if call.args else call.keywords[0].arg
        switched = isinstance(value, ast.Constant) and value.value is False and keyword in (None, "mode")
    if not switched:
        return None
    owner = call.func.value
    if isinstance(owner, ast.Call):  # `enc = Encoder(...).eval()`: the name it is bound to
        target = index.assigned_to.get(call)
        return ast_dotted_name(target) if target is not None else None
    return ast_dotted_name(owner)


def _ast_train_receiver(index: AstIndex, call: ast.Call) -> Optional[str]:
    if isinstance(call.func, ast.Attribute) and call.func.attr == "train" and _ast_eval_receiver(index, call) is None:
        return ast_dotted_name(call.func.value)
    return None


def _ast_is_eval_loader(expr: ast.AST) -> bool:
    if isinstance(expr, ast.Call) and (expr.args or expr.keywords):
        wrapped = (isinstance(expr.func, ast.Name) and expr.func.id in {"enumerate", "tqdm", "iter", "zip"}) or (
            isinstance(expr.func, ast.Attribute) and expr.func.attr == "tqdm")
        if wrapped:
            values = [arg.value if isinstance(arg, ast.Starred) else arg for arg in expr.args]
            values += [keyword.value for keyword in expr.keywords if keyword.arg is None]  # **kwargs
            return any(_ast_is_eval_loader(value) for value in values)
    name = ast_dotted_name(expr)
    if name is None:
        return False
    last = name.split(".")[-1]
    return bool(_EVAL_LOADER.search(last) and _LOADER.search(last))


def _ast_is_model_call(facts: _AstFacts, call: ast.Call, receivers: Set[str], scope) -> bool:
    """``_Checker._is_model_call``, a superset where a helper's parameters decide (``_runs_model_argument``)."""
    index = facts.index
    name = ast_dotted_name(call.func)
    if name is None:
        return False
    if name in receivers:
        return True
    owner, _, last = name.rpartition(".")
    if owner and last == "forward" and (owner in receivers or looks_like_model(owner.split(".")[-1])):
        return True
    qualified = index.qualified_name(call.func)
    if qualified is not None and qualified.split(".")[0] in {"torch", "numpy", "torchvision", "math"}:
        return False
    func = call.func
    if isinstance(func, ast.Name) and func.id[:1].isupper() and (
            func.id in index.imports or func.id in facts.top_level_classes or _CLASS_NAME.match(func.id)):
        return False  # a constructor
    if owner and owner in receivers and isinstance(func, ast.Attribute) and last not in _NOT_A_RUN:
        return True
    if isinstance(func, ast.Name):
        if _ast_bound_to_model(facts, func, scope):
            return True
        if func.id in facts.helpers and any(
                arg.id in receivers or looks_like_model(arg.id) or _ast_bound_to_model(facts, arg, scope)
                for arg in [*call.args, *(k.value for k in call.keywords if k.arg is not None)]
                if isinstance(arg, ast.Name)):
            return True  # `greedy_decode(model, src)`: the helper may run the model it is given
    return looks_like_model(last)


def _ast_bound_to_model(facts: _AstFacts, name: ast.Name, scope) -> bool:
    index = facts.index
    value = index.single_value(name.id, scope)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda", "eval"):
        value = value.func.value  # `Generator(...).to(device)`
    if not isinstance(value, ast.Call):
        return False
    if _MODEL_FACTORIES.search(index.qualified_name(value.func) or ""):
        return True
    if not isinstance(value.func, ast.Name):
        return False
    built = value.func.id
    return built in facts.model_classes or (built[:1].isupper() and looks_like_model(built))


class EvalWithoutNoGrad(Rule):
    """## What it does
    Flags evaluation code that runs a model with autograd on: a function or loop that puts the model in
    eval mode (`model.eval()`, `model.train(False)`), is named as evaluation (`validate`, `evaluate`,
    `eval_*`, `predict`, `infer*`...) or iterates a validation/test loader, and calls the model without
    `torch.no_grad()`, `torch.inference_mode()` or `torch.set_grad_enabled(False)` around it.

    Silent where gradients are wanted or grad mode is handled: code that calls `.backward()`,
    `torch.autograd.grad`, `requires_grad_()`, reads `.grad`, steps an optimizer or switches grad mode
    itself (adversarial evaluation, saliency maps, test-time training), also where that code calls a
    function of the same file that does so (a linear-probe driver `eval_linear()` that freezes the backbone
    with `.eval()` and calls `train_head(...)`: `no_grad` around it would reach the training too; calls of a
    helper decorated with `no_grad` are not model calls, whatever its name); functions decorated with
    `no_grad`/`inference_mode`; functions called from a `no_grad` block or function in the same file, or
    from a training step, directly or through other functions of the file such as a loss function (their
    output may be differentiated: `model.eval()` there may only freeze BatchNorm); `forward`, `training_step`,
    `validation_step` and other framework hooks (Lightning and friends already disable gradients there);
    pytest tests. Methods named `predict`/`evaluate` are flagged only when they also switch to eval mode or
    iterate an evaluation loader: on their own the name says too little about how the result is used.
    Registered factories (`@register_model def test_resnet(...)`) build a model and are skipped; a
    constructor call (`Encoder(...)`, a class imported or defined in the file, any `CamelCase(...)`) is not
    a forward pass. Also silent: tests in pytest/unittest files (`test_*`, `testFoo`, their loops included),
    functions that enter `torch.no_grad()` through `stack.enter_context(...)`, and functions the file never
    calls but hands to other code (`inference_on_dataset(eval_fn, ...)`, a returned closure): the code
    that runs them sets the grad mode.

    A module counts as a model when its name looks like one (`model`, `netD`, `generator`), when the code
    calls it after its `.eval()` (`G_AB.eval(); G_AB(x)`, also `enc = Encoder(...).eval()`), when it is bound
    (also as a global) to a model-named class or an `nn.Module` subclass of the file, or when a function of
    the file receives it and runs it (`greedy_decode(model, src)`). A method that prepares a module rather than
    running it (`model.convert_to_fp16()`, `load_*`, `set_*`, `init_*`, `fuse_*`, `to_*`...) is not a
    forward pass. A helper called from the training loop
    normally stays silent (its output may be differentiated), except one that returns nothing and stores
    nothing outside itself (a `sample_images()` that saves a grid).

    ## Why is this slow?
    `model.eval()` only changes dropout and batch-norm behaviour; it does not turn autograd off. Every
    forward pass still records the graph and keeps every intermediate activation alive until the outputs
    die, so evaluation runs slower and holds several times the memory it needs (often the reason the
    evaluation batch size cannot match training's).

    ## Example
    ```python
    def evaluate(model, val_loader):
        model.eval()
        correct = 0
        for images, labels in val_loader:
            correct += (model(images).argmax(1) == labels).sum().item()
        return correct / len(val_loader.dataset)
    ```

    ## Use instead
    ```python
    @torch.no_grad()
    def evaluate(model, val_loader):
        model.eval()
        correct = 0
        for images, labels in val_loader:
            correct += (model(images).argmax(1) == labels).sum().item()
        return correct / len(val_loader.dataset)
    ```

    ## Fix safety
    The fix is safe: it adds `@torch.no_grad()` as the innermost decorator of the function (with the
    file's alias for `torch`, importing `torch` where the file does not), or, for an evaluation loop that is
    not a function of its own (inside a training function, at module level, under
    `if __name__ == "__main__":`), wraps the loop in `with torch.no_grad():`. The rule only fires where no
    gradient is computed in that code, so values are unchanged; outputs no longer carry `grad_fn`.
    What torchlint cannot see is a caller in another file that differentiates the result (a training step
    importing the function): calls within the file are followed, through helpers too, and silence the rule,
    but a function shared across modules deserves a look before `fix --apply` (or a `# noqa: TL202`).

    There is no fix (report only) for `async def` functions, for loops that `yield` or `await` (a `with`
    block would leak the grad mode to the consumer), and for generator functions when targeting
    PyTorch < 2.0.

    ## PyTorch versions
    `torch.no_grad()` works as a decorator and as a context manager in every supported version. On a
    generator function the decorator re-enters no-grad mode at every resumption and restores the caller's
    mode at every `yield` (PyTorch >= 1.8; torchlint offers the fix for generators from 2.0 on).
    `torch.inference_mode()` (>= 1.9) is faster still, but its tensors cannot later be used in autograd,
    so the fix does not use it.
    """

    code = "TL202"
    name = "eval-without-no-grad"
    message = "evaluation runs the model with autograd on; disable it with `torch.no_grad()`"
    summary = "Evaluation/inference code runs the model without torch.no_grad()"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.SAFE,)
    # What can make code an evaluation candidate: an eval switch, an evaluation-named function, or a loop
    # over an evaluation loader. Checked in `may_fire` from the cheapest test to the dearest.
    # `torch`, then a `.eval(`/`.train(` call (however spaced: see text_prefilter), `_EVAL_DEF_TEXT` or
    # `_EVAL_LOADER_TEXT`.
    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        if "torch" not in text:
            return False
        if has_method_call(text, "eval") or has_method_call(text, "train"):
            return True
        lower = text.lower()
        if any(hint in lower for hint in _LOADER_HINTS) and _may_name_eval_loader(lower):
            return True
        return bool(_EVAL_DEF_TEXT.search(text))

    has_ast_prefilter = True

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings: Settings) -> bool:
        return _ast_may_report(index_of(tree), text)

    def check(self, ctx: RuleContext) -> None:
        _Checker(ctx).run()


class _Checker:
    def __init__(self, ctx: RuleContext) -> None:
        self.ctx = ctx
        self.a: FileAnalysis = ctx.analysis
        self.alias = self.a.module_alias("torch")
        self._text_cache: Dict[cst.CSTNode, str] = {}
        self._under_no_grad: Dict[str, bool] = {}
        self._wants_grad: Optional[Set[Tuple[str, Optional[str]]]] = None
        self._passed_names: Optional[Set[str]] = None  # names handed to some call as an argument
        self._returned: Dict[cst.CSTNode, Set[str]] = {}  # function -> ``_returned_names``
        self.model_classes = self._model_classes()

    # --- driver ------------------------------------------------------------------------------
    def run(self) -> None:
        a = self.a
        if self._grad_globally_off() or not any(v.split(".")[0] == "torch" for v in a.imports.values()):
            return
        skip_functions: Set[cst.CSTNode] = set()  # whole functions handled (reported or silenced)
        base = a.path.replace("\\", "/").rsplit("/", 1)[-1]
        pytest_file = any(v.split(".")[0] in {"pytest", "unittest"} for v in a.imports.values()) or bool(
            re.match(r"^(test_.*|.*_test|conftest)\.py$", base))
        for info in a.functions:
            if any(f.node in skip_functions for f in self._function_chain(info.parent)):
                skip_functions.add(info.node)
                continue
            verdict = self._check_function(info, pytest_file)
            if verdict:
                skip_functions.add(info.node)
        reported_loops: List[cst.CSTNode] = []
        for loop in a.loops:
            node = loop.node
            if not isinstance(node, cst.For) or node.asynchronous is not None:
                continue
            function = loop.function
            if any(f.node in skip_functions for f in self._function_chain(function)):
                continue
            if any(a.contains(outer, node) for outer in reported_loops):
                continue
            if self._check_loop(node, function):
                reported_loops.append(node)

    def _function_chain(self, info: Optional[FunctionInfo]) -> Iterable[FunctionInfo]:
        while info is not None:
            yield info
            info = info.parent

    # --- whole functions ---------------------------------------------------------------------
    def _check_function(self, info: FunctionInfo, pytest_file: bool) -> bool:
        """True when the function is settled: reported, or known to run without autograd."""
        node = info.node
        assert isinstance(node, cst.FunctionDef)
        if any("grad" in d or "inference" in d for d in info.decorators):
            return True
        if any("register" in d.lower() for d in info.decorators):
            return True  # a registered factory (`@register_model def test_resnet(...)`): it builds, not runs
        if self._called_without_grad(info.name):
            return True
        if _FRAMEWORK_NO_GRAD.search(info.name):
            return True
        if _HOOK_NAME.search(info.name):
            return False
        words = info.name.strip("_").lower().split("_")
        if pytest_file and info.name.lstrip("_").startswith("test"):
            return True  # a test or test helper (`test_roi_heads`, `_test_eval`, unittest's `testKeypointHead`)
        if words[0] == "test" and not _has_params(node):
            return False  # a pytest test
        if any(call_name(c) == "enter_context" and _NO_GRAD_TEXT.search(self._text(c))
               for c in self.a.calls_in(node)):
            return True  # `stack.enter_context(torch.no_grad())`: the rest of the function runs without autograd
        if self._only_passed_along(info):
            return True  # `inference_on_dataset(eval_wrapper, ...)`: the code it is handed to sets grad mode
        own_calls = self._own_calls(info)
        eval_receivers, switches_mode = self._eval_switches(info, own_calls)
        if switches_mode:  # model.train() in here too, or eval() only on some path: a mixed function
            return False
        named = words[0] in _EVAL_WORDS or words[-1] in _EVAL_WORDS or words[0] == "test"
        eval_loader = any(
            isinstance(l.node, cst.For) and self._is_eval_loader(l.node.iter)
            for l in self.a.loops if l.function is info
        )
        called = {dotted_name(c.func) for c in own_calls}
        model_receivers = {r for r in eval_receivers
                           if r == "self" or looks_like_model(r.split(".")[-1]) or r in called}
        if not (model_receivers or eval_loader or (named and info.class_name is None)):
            return False
        text = self._text(node)
        if _GRAD_TEXT.search(text) or any(self.a.is_optimizer_step(c) for c in own_calls):
            return False
        if any(self._runs_grad_code(c, info.class_name) for c in own_calls):
            return False  # it trains through a helper of this file: no_grad here would reach that helper too
        model_calls = [c for c in own_calls if self._is_model_call(c, eval_receivers) and not self._guarded(c, node)]
        if not model_calls:
            return False
        if self._caller_wants_grad(info.name):
            return True
        model = dotted_name(model_calls[0].func) or "the model"
        torch_name = self.alias or "torch"
        fix = None
        generator = bool(_GENERATOR_TEXT.search(text))
        if node.asynchronous is not None or _AWAIT_TEXT.search(text):
            message = (f"`{info.name}()` evaluates `{model}(...)` with autograd on; "
                       f"run the model calls inside `with {torch_name}.no_grad():`")
        else:
            message = (f"`{info.name}()` evaluates `{model}(...)` with autograd on; "
                       f"decorate it with `@{torch_name}.no_grad()`")
            if not generator or self.ctx.torch_version >= (2, 0):
                decorator = cst.Decorator(decorator=cst.parse_expression(f"{torch_name}.no_grad()"))
                new = node.with_changes(decorators=[*node.decorators, decorator])
                fix = Fix.replace(node, new, Applicability.SAFE, self._imports())
            else:
                message += " (no fix for a generator before PyTorch 2.0)"
        self.ctx.report(node.name, message=message, fix=fix)
        return True

    # --- loops outside evaluation functions ----------------------------------------------------
    def _check_loop(self, loop: cst.For, function: Optional[FunctionInfo]) -> bool:
        a = self.a
        scope = function.node if function is not None else a.module
        if any(self._guarding_with(anc) for anc in a.ancestors(loop)):
            return False
        receivers = self._preceding_eval(loop)
        if receivers is None:  # the model is put back into train mode just before: not an eval loop
            return False
        if not receivers and not self._is_eval_loader(loop.iter):
            return False
        text = self._text(loop)
        if _GRAD_TEXT.search(text):
            return False
        calls = [c for c in a.calls_in(loop.body) if a.scope_of(c) is scope]
        if any(a.is_optimizer_step(c) for c in calls):
            return False
        class_name = function.class_name if function is not None else None
        if any(self._runs_grad_code(c, class_name) for c in calls):
            return False  # the loop trains through a helper of this file (`fit_one_epoch(...)`)
        # eval() inside the loop body counts too
        receivers = receivers | {r for r in (self._eval_receiver(c) for c in calls) if r}
        model_calls = [c for c in calls if self._is_model_call(c, receivers) and not self._guarded(c, loop)]
        if not model_calls:
            return False
        if function is not None and (self._called_without_grad(function.name) or self._caller_wants_grad(function.name)):
            return False
        model = dotted_name(model_calls[0].func) or "the model"
        torch_name = self.alias or "torch"
        message = (f"evaluation loop calls `{model}(...)` with autograd on; "
                   f"wrap it in `with {torch_name}.no_grad():`")
        fix = None
        if not _GENERATOR_TEXT.search(text) and not _AWAIT_TEXT.search(text):
            with_node = cst.With(
                items=[cst.WithItem(item=cst.parse_expression(f"{torch_name}.no_grad()"))],
                body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=[])]),
                leading_lines=loop.leading_lines,
            )
            fix = Fix.replace(loop, with_node, Applicability.SAFE, self._imports())
        self.ctx.report(loop.iter, message=message, fix=fix)
        return True

    def _preceding_eval(self, loop: cst.For) -> Optional[Set[str]]:
        """Receivers of ``X.eval()`` statements before the loop in its block; None if ``X.train()`` comes last."""
        block = self.a.parent(loop)
        body: Sequence[cst.CSTNode] = getattr(block, "body", ())
        if not isinstance(body, (list, tuple)) or loop not in body:
            return set()
        receivers: Set[str] = set()
        for statement in reversed(body[: list(body).index(loop)]):
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, (cst.Expr, cst.Assign)) and isinstance(small.value, cst.Call):
                    call = small.value
                    receiver = self._eval_receiver(call)
                    if receiver:
                        receivers.add(receiver)
                    elif self._train_receiver(call):
                        return receivers or None
        return receivers

    # --- facts -----------------------------------------------------------------------------
    def _grad_globally_off(self) -> bool:
        """``torch.set_grad_enabled(False)`` as a module-level statement: the script never records graphs."""
        for call in self.a.calls_by_name.get("set_grad_enabled", ()):
            if (self.a.qualified_name(call.func) in _SET_GRAD and call.args and is_literal(call.args[0].value, "False")
                    and isinstance(self.a.parent(call), cst.Expr) and self.a.function_of(call) is None):
                return True
        return False

    def _own_calls(self, info: FunctionInfo) -> List[cst.Call]:
        return [c for c in self.a.calls_in(info.node) if self.a.function_of(c) is info]

    def _eval_receiver(self, call: cst.Call) -> Optional[str]:
        """``m`` for ``m.eval()`` / ``m.train(False)`` / ``m.train(mode=False)``."""
        if not isinstance(call.func, cst.Attribute):
            return None
        attr = call.func.attr.value
        switched = attr == "eval" and not call.args
        switched = switched or (attr == "train" and len(call.args) == 1 and is_literal(call.args[0].value, "False")
                                and (call.args[0].keyword is None or call.args[0].keyword.value == "mode"))
        if not switched:
            return None
        owner = call.func.value
        if isinstance(owner, cst.Call):  # `enc = Encoder(...).eval()`: the name it is bound to
            assign = self.a.parent(call)
            if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
                return dotted_name(assign.targets[0].target)
            return None
        return dotted_name(owner)

    def _train_receiver(self, call: cst.Call) -> Optional[str]:
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "train" and self._eval_receiver(call) is None:
            return dotted_name(call.func.value)
        return None

    def _eval_switches(self, info: FunctionInfo, calls: List[cst.Call]):
        """(receivers of unconditional eval() calls, whether the function also switches modes otherwise)."""
        receivers: Set[str] = set()
        mixed = False
        for call in calls:
            if self._train_receiver(call):
                mixed = True
            receiver = self._eval_receiver(call)
            if receiver is None:
                continue
            if any(isinstance(anc, (cst.If, cst.IfExp, cst.Match, cst.BooleanOperation))
                   for anc in self._ancestors_within(call, info.node)):
                mixed = True
            receivers.add(receiver)
        return receivers, mixed

    def _ancestors_within(self, node: cst.CSTNode, outer: cst.CSTNode) -> Iterable[cst.CSTNode]:
        for anc in self.a.ancestors(node):
            if anc is outer:
                return
            yield anc

    def _guarding_with(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.With):
            return False
        for item in node.items:
            expr = item.item
            if isinstance(expr, (cst.Name, cst.Attribute)):
                return True  # a context manager made elsewhere (`ctx = torch.no_grad()`): assume it may be
            if not isinstance(expr, cst.Call):
                continue
            called = dotted_name(expr.func) or ""
            if "grad" in called.lower() or "inference" in called.lower():
                return True  # a project's own no-grad helper
            qualified = self.a.qualified_name(expr.func)
            if qualified in _NO_GRAD:
                return True
            if qualified in _SET_GRAD and expr.args and is_literal(expr.args[0].value, "False"):
                return True
        return False

    def _guarded(self, call: cst.Call, outer: cst.CSTNode) -> bool:
        for anc in self._ancestors_within(call, outer):
            if self._guarding_with(anc):
                return True
        return self._guarding_with(outer)

    def _is_eval_loader(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Call) and expr.args and isinstance(expr.func, cst.Name) and \
                expr.func.value in {"enumerate", "tqdm", "iter", "zip"}:
            return any(self._is_eval_loader(arg.value) for arg in expr.args if arg.keyword is None)
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "tqdm":
            return any(self._is_eval_loader(arg.value) for arg in expr.args if arg.keyword is None)
        name = dotted_name(expr)
        if name is None:
            return False
        last = name.split(".")[-1]
        return bool(_EVAL_LOADER.search(last) and _LOADER.search(last))

    def _is_model_call(self, call: cst.Call, receivers: Set[str]) -> bool:
        name = dotted_name(call.func)
        if name is None:
            return False
        if name in receivers:
            return True
        owner, _, last = name.rpartition(".")
        if owner and last == "forward" and (owner in receivers or looks_like_model(owner.split(".")[-1])):
            return True
        qualified = self.a.qualified_name(call.func)
        if qualified is not None and qualified.split(".")[0] in {"torch", "numpy", "torchvision", "math"}:
            return False
        if isinstance(call.func, cst.Name) and call.func.value[:1].isupper() and (
                call.func.value in self.a.imports or call.func.value in self._top_level_classes()
                or _CLASS_NAME.match(call.func.value)):
            return False  # `Encoder(...)` builds a module; running it is a call of what it returns
        if owner and owner in receivers and isinstance(call.func, cst.Attribute) and _may_run(last):
            return True  # `agent.eval()` then `agent.get_action(obs)`
        if isinstance(call.func, cst.Name) and self._bound_to_model(call.func):
            return True
        if isinstance(call.func, cst.Name) and any(
                f.name == call.func.value and f.class_name is None and any("grad" in d or "inference" in d
                                                                            for d in f.decorators)
                for f in self.a.functions):
            return False  # `score_network(...)`, a helper of this file decorated with no_grad: not a model
        if isinstance(call.func, cst.Name) and self._runs_model_argument(call, receivers):
            return True
        return looks_like_model(last)

    def _runs_model_argument(self, call: cst.Call, receivers: Set[str]) -> bool:
        """``greedy_decode(model, src)``: a function of this file given the model, which calls it."""
        helper = next((f for f in self.a.functions if f.name == call.func.value and f.class_name is None
                       and isinstance(f.node, cst.FunctionDef)), None)
        if helper is None:
            return False
        params = [p.name.value for p in helper.node.params.params]
        for index, arg in enumerate(call.args):
            if arg.star or not isinstance(arg.value, cst.Name):
                continue
            given = arg.value.value
            if not (given in receivers or looks_like_model(given) or self._bound_to_model(arg.value)):
                continue
            param = arg.keyword.value if arg.keyword is not None else (params[index] if index < len(params) else None)
            if param is None or any("grad" in d or "inference" in d for d in helper.decorators):
                continue
            if any(_runs(c, param) and not self._guarded(c, helper.node) for c in self.a.calls_in(helper.node)):
                return True
        return False

    def _bound_to_model(self, name: cst.Name) -> bool:
        value = self.a.single_value(name.value, self.a.scope_of(name))
        if value is None and self.a.scope_of(name) is not self.a.module and not self.a.values_of(
                name.value, self.a.scope_of(name)):
            value = self.a.single_value(name.value, self.a.module)  # a global: `G_AB = Generator(...)` in a script
        if isinstance(value, cst.Call) and call_name(value) in ("to", "cuda", "eval") and isinstance(value.func, cst.Attribute):
            value = value.func.value  # `Generator(...).to(device)`
        if not isinstance(value, cst.Call):
            return False
        qualified = self.a.qualified_name(value.func) or ""
        if _MODEL_FACTORIES.search(qualified):
            return True
        if not isinstance(value.func, cst.Name):
            return False
        built = value.func.value
        # a class of this file that subclasses nn.Module, or a model-named class (`GeneratorResNet(...)`)
        return built in self.model_classes or (built[:1].isupper() and looks_like_model(built))

    def _top_level_classes(self) -> Set[str]:
        return {s.name.value for s in self.a.module.body if isinstance(s, cst.ClassDef)}

    def _model_classes(self) -> Set[str]:
        """Top-level classes of this file that subclass a torch Module."""
        out: Set[str] = set()
        for statement in self.a.module.body:
            if isinstance(statement, cst.ClassDef):
                for base in statement.bases:
                    qualified = self.a.qualified_name(base.value) or dotted_name(base.value) or ""
                    if qualified.endswith("Module") or qualified in out:
                        out.add(statement.name.value)
        return out

    def _called_without_grad(self, name: str, seen: Optional[Set[str]] = None) -> bool:
        """Some call of ``name`` in this file runs under no_grad (a with block or a no_grad function)."""
        if name in self._under_no_grad:
            return self._under_no_grad[name]
        seen = seen or set()
        if name in seen:
            return False
        seen.add(name)
        a = self.a
        result = False
        for call in a.calls_by_name.get(name, ()):
            if any(self._guarding_with(anc) for anc in a.ancestors(call)):
                result = True
                break
            caller = a.function_of(call)
            while caller is not None and isinstance(caller.node, cst.Lambda):
                caller = caller.parent
            if caller is not None and (any("grad" in d or "inference" in d for d in caller.decorators)
                                       or self._called_without_grad(caller.name, seen)):
                result = True
                break
        if not result:  # torch.no_grad()(evaluate)
            for wrapper in ("no_grad", "inference_mode"):
                for call in a.calls_by_name.get(wrapper, ()):
                    outer = a.parent(call)
                    if isinstance(outer, cst.Call) and outer.func is call and any(
                            isinstance(arg.value, (cst.Name, cst.Attribute)) and
                            (dotted_name(arg.value) or "").split(".")[-1] == name for arg in outer.args):
                        result = True
        self._under_no_grad[name] = result
        return result

    def _caller_wants_grad(self, name: str, seen: Optional[Set[str]] = None) -> bool:
        """A call of ``name`` in a training step, directly or through other functions of this file (a helper
        called by the loss function): its output may be differentiated."""
        a = self.a
        seen = set() if seen is None else seen
        if name in seen:
            return False
        seen.add(name)
        if self._returns_nothing(name):
            return False  # `sample_images()` saving a grid: nothing reaches the caller to differentiate
        for call in a.calls_by_name.get(name, ()):
            if a.training_loop_of(call) is not None:
                return True
            caller = a.function_of(call)
            scope = caller.node if caller is not None else a.module
            loops = [l.node for l in a.enclosing_loops(call)]
            for backward in a.calls_by_name.get("backward", ()):
                if a.scope_of(backward) is scope and a.comes_before(call, backward) and a.is_backward_call(backward) \
                        and [l.node for l in a.enclosing_loops(backward)] == loops:
                    return True
            if caller is not None and caller.name != "<lambda>" and self._caller_wants_grad(caller.name, seen):
                return True
        return False

    def _runs_grad_code(self, call: cst.Call, class_name: Optional[str]) -> bool:
        """``call`` runs a function of this file that computes gradients (``backward()``, an optimizer step,
        ``torch.autograd.grad``...), directly or through the file's other functions: ``fit_head(...)`` or
        ``self.train_epoch()``. A no_grad decorator or block around the call would reach that code too."""
        target = _called_function_key(call, class_name)
        return target is not None and target in self._grad_functions()

    def _grad_functions(self) -> Set[Tuple[str, Optional[str]]]:
        """(name, class) of the file's functions that compute gradients or call one that does."""
        if self._wants_grad is not None:
            return self._wants_grad
        defs = [f for f in self.a.functions if isinstance(f.node, cst.FunctionDef)]
        own = {id(f): self._own_calls(f) for f in defs}
        wanting = {(f.name, f.class_name) for f in defs
                   if _COMPUTES_GRAD_TEXT.search(self._text(f.node))
                   or any(self.a.is_optimizer_step(c) for c in own[id(f)])}
        changed = True
        while changed:  # through helpers: a driver calling `fit_one_epoch()` that calls `backward_step()`
            changed = False
            for f in defs:
                key = (f.name, f.class_name)
                if key not in wanting and any(_called_function_key(c, f.class_name) in wanting for c in own[id(f)]):
                    wanting.add(key)
                    changed = True
        self._wants_grad = wanting
        return wanting

    def _only_passed_along(self, info: FunctionInfo) -> bool:
        """The function is never called in this file, only handed to another call as an argument."""
        name = info.name
        if self.a.calls_by_name.get(name):
            return False
        if info.parent is not None and name in self._returned_names(info.parent.node):
            return True  # a closure returned to the caller, who decides the grad mode it runs in
        if self._passed_names is None:  # once per file: a file with many functions asks for each
            self._passed_names = {arg.value.value for call in self.a.calls for arg in call.args
                                  if isinstance(arg.value, cst.Name)}
        return name in self._passed_names

    def _returned_names(self, node: cst.CSTNode) -> Set[str]:
        """The names ``node`` returns bare (``return inner``), walked once per function: a function holding
        many closures asked for each."""
        names = self._returned.get(node)
        if names is None:
            names = self._returned[node] = {r.value.value for r in _walk_nodes(node)
                                            if isinstance(r, cst.Return) and isinstance(r.value, cst.Name)}
        return names

    def _returns_nothing(self, name: str) -> bool:
        """The file's only function ``name`` hands nothing back: no ``return <value>``, no ``yield``, no
        stores into attributes, items, globals or lists it did not create."""
        functions = [f for f in self.a.functions if f.name == name]
        if len(functions) != 1 or not isinstance(functions[0].node, cst.FunctionDef):
            return False
        node = functions[0].node
        for inner in _walk_nodes(node.body):
            if isinstance(inner, cst.Return) and inner.value is not None:
                return False
            if isinstance(inner, (cst.Yield, cst.Global, cst.Nonlocal, cst.AugAssign)):
                return False
            if isinstance(inner, cst.AssignTarget) and not isinstance(inner.target, (cst.Name, cst.Tuple, cst.List)):
                return False
            if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value in {
                    "append", "extend", "update", "copy_", "insert", "put", "setdefault", "add_"}:
                return False
        return True

    def _text(self, node: cst.CSTNode) -> str:
        text = self._text_cache.get(node)
        if text is None:
            text = self.a.module.code_for_node(node)
            self._text_cache[node] = text
        return text

    def _imports(self):
        return () if self.alias else (ImportRequest("torch"),)


_NOT_A_RUN = {"eval", "train", "to", "cuda", "cpu", "parameters", "named_parameters", "state_dict", "modules",
              "load_state_dict", "zero_grad", "apply", "children", "named_modules", "buffers", "half", "float",
              "generate", "register_forward_hook", "requires_grad_", "share_memory", "fuse_model", "type"}  # HF generate() is no-grad itself


# First words of methods that change or prepare a module rather than run it.
_SETUP_WORDS = {"convert", "to", "load", "save", "init", "initialize", "register", "set", "fuse", "compile", "export",
                "prepare", "freeze", "unfreeze", "reset", "half", "float", "cuda", "cpu", "tie", "resize"}


def _called_function_key(call: cst.Call, class_name: Optional[str]) -> Optional[Tuple[str, Optional[str]]]:
    """(name, class) of the file's function ``call`` may run: ``helper(...)``, or ``self.method(...)`` in a
    method of ``class_name``."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value, None
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return func.attr.value, class_name
    return None


def _runs(call: cst.Call, param: str) -> bool:
    """``param(...)`` or ``param.decode(...)``: a forward pass of the module bound to ``param``."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value == param
    return (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == param
            and _may_run(func.attr.value))


def _may_run(method: str) -> bool:
    """A method of a module that may run its forward pass: not one of ``_NOT_A_RUN`` nor one named as a
    conversion or set-up step (``convert_to_fp16``, ``load_weights``, ``set_mode``, ``init_cache``)."""
    return method not in _NOT_A_RUN and method.lstrip("_").split("_")[0] not in _SETUP_WORDS


def _has_params(node: cst.FunctionDef) -> bool:
    params = node.params
    return bool(params.params or params.posonly_params or params.kwonly_params
                or isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None)
