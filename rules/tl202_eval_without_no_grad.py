"""TL202: evaluation code that records autograd graphs nobody will use."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Dict, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from torchlint.facts.index import (COMPREHENSIONS, AstCallInfo, AstFunction, AstIndex, call_name, dotted_name,
                                   source_order, walk)
from torchlint.facts.modules import module_subclasses, plain_instance
from torchlint.facts.steps import ends_after_first_iteration, instance_classes
from torchlint.config import Settings
from torchlint.facts.evaluation import (called_without_grad, decorated_grad_off, decorator_names, eval_receiver,
                                        grad_globally_off, grad_off_anywhere_around, grad_off_between,
                                        is_eval_loader, train_receiver)
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, IndexContext, Rewrite, Rule
from torchlint.facts.text_gates import has_method_call, lowered

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis

Def = Union[ast.FunctionDef, ast.AsyncFunctionDef]
_MATCH = getattr(ast, "Match", ast.If)  # Python 3.10+
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
             ast.AsyncFunctionDef, ast.ClassDef, _MATCH, getattr(ast, "TryStar", ast.Try))
_BRANCHES = (ast.If, ast.IfExp, _MATCH, ast.BoolOp)  # what makes an eval() switch conditional
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
_BY_HAND_CALLS = 5  # a notebook's calls of an evaluation def, each on its own in a cell: a few runs
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
# Pre-filter texts (supersets of what `detect` accepts; see `may_fire`).
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
    `no_grad`/`inference_mode`; functions called from a `no_grad` block or function in the same file (also
    through a table of functions called there: `fn = [infer_plain, infer_flipped][level]`, `heads[mode](x)`),
    or from a training step, directly or through other functions of the file such as a loss function (their
    output may be differentiated: `model.eval()` there may only freeze BatchNorm); `forward`, `training_step`,
    `validation_step` and other framework hooks (Lightning and friends already disable gradients there);
    pytest tests. Methods named `predict`/`evaluate` are flagged only when they also switch to eval mode or
    iterate an evaluation loader: on their own the name says too little about how the result is used.
    Registered factories (`@register_model def test_resnet(...)`) build a model and are skipped; a
    constructor call (`Encoder(...)`, a class imported or defined in the file, any `CamelCase(...)`) is not
    a forward pass. Also silent: tests in pytest/unittest files (`test_*`, `testFoo`, their loops included),
    functions that enter `torch.no_grad()` through `stack.enter_context(...)`, and functions the file never
    calls but hands to other code (`inference_on_dataset(eval_fn, ...)`, a returned closure): the code
    that runs them sets the grad mode. Nor where the evaluation runs only a few times: a loop that leaves
    after its first batch (`for x, y in loader: out = model(x); break`, a peek for a plot), and a notebook's
    def with no loop of its own that the notebook calls at most 5 times, each call on its own in a cell (in no
    loop, comprehension or def) and the name used nowhere else (`predict_sentiment(model, "I love it")`): a
    graph built a few times per run costs nothing worth a finding (a script's def may be imported and called
    in a loop elsewhere, so this holds for notebooks only).

    A module counts as a model when its name looks like one (`model`, `netD`, `generator`), when the code
    calls it after its `.eval()` (`G_AB.eval(); G_AB(x)`, also `enc = Encoder(...).eval()`), when it is bound
    (also as a global) to a model-named class or an `nn.Module` subclass of the file, or when a function of
    the file receives it and runs it (`greedy_decode(model, src)`). A method that prepares a module rather than
    running it (`model.convert_to_fp16()`, `load_*`, `set_*`, `init_*`, `fuse_*`, `to_*`...) is not a
    forward pass, nor is a container view (`.items()`, `.keys()`, `.values()`: a helper given a checkpoint
    named `model_state` that prints its entries), nor a method call that is a statement of its own without arguments
    (`generator.remove_weight_norm()`) or a method whose definitions in the file's classes call nothing
    through `self`, `super()` or their parameters (a mask helper returning `torch.triu(...)`). An object of a
    class that derives from no `nn.Module` is no model (its bases, followed through the file and the other
    files of the project, are builtin or standard-library classes or such classes: `env = Env(args)` with
    `class Env:`, `ema_helper = EMAHelper(...)`): calling it or one of its methods is no forward pass, and its
    `.eval()` / `.train()` switch no model, unless that method of the class makes a call (an agent whose
    `eval()` puts its network in eval mode: its methods may then run it); a class with a base from another
    package may be a Module and counts as before. A helper
    called from the training loop normally stays silent (its output may be differentiated), except one that returns nothing and stores
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
    text_gate = (("torch",),)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        if "torch" not in text:
            return False
        if has_method_call(text, "eval") or has_method_call(text, "train"):
            return True
        lower = lowered(text)
        if any(hint in lower for hint in _LOADER_HINTS) and _may_name_eval_loader(lower):
            return True
        return bool(_EVAL_DEF_TEXT.search(text))

    def detect(self, ctx: IndexContext) -> None:
        _Detector(ctx).run()


class _Detector:
    """One file's evaluation code: whole functions first, then the loops outside the settled ones."""

    def __init__(self, ctx: IndexContext) -> None:
        self.ctx = ctx
        self.index: AstIndex = ctx.index
        self.alias = self.index.module_alias("torch")
        self._text_cache: Dict[ast.AST, str] = {}
        self._wants_grad: Optional[Set[Tuple[str, Optional[str]]]] = None
        self._passed_names: Optional[Set[str]] = None  # names handed to some call as an argument
        self._returned: Dict[ast.AST, Set[str]] = {}  # function -> ``_returned_names``
        self._methods: Dict[str, List[Def]] = {}  # method name -> its defs in the file's classes
        self._top_level_classes = {s.name for s in self.index.tree.body if isinstance(s, ast.ClassDef)}
        self.model_classes = module_subclasses(self.index)  # classes of this file that subclass a torch Module
        # by the function that runs them (None: the module), each in source order: asked per function, a scan
        # of the file's loops or `backward` calls each time cost functions x loops on a long file
        self._loops_by_function: Optional[Dict[Optional[AstFunction], List[ast.AST]]] = None
        self._backwards_by_function: Optional[Dict[Optional[AstFunction], List[AstCallInfo]]] = None

    # --- driver ------------------------------------------------------------------------------
    def run(self) -> None:
        index = self.index
        if not index.imports_torch() or grad_globally_off(index):
            return
        skip_functions: Set[ast.AST] = set()  # whole functions handled (reported or silenced)
        base = self.ctx.path.replace("\\", "/").rsplit("/", 1)[-1]
        pytest_file = any(v.split(".")[0] in {"pytest", "unittest"} for v in index.imports.values()) or bool(
            re.match(r"^(test_.*|.*_test|conftest)\.py$", base))
        for function in index.functions:
            if any(f in skip_functions for f in self._function_chain(index.function_of(function))):
                skip_functions.add(function)
                continue
            if self._check_function(function, pytest_file):
                skip_functions.add(function)
        reported_loops: List[ast.For] = []
        for loop in index.loops:
            node = loop.node
            if type(node) is not ast.For:
                continue
            if any(f in skip_functions for f in self._function_chain(loop.function)):
                continue
            if any(index.contains(outer, node) for outer in reported_loops):
                continue
            if self._check_loop(node, loop.function):
                reported_loops.append(node)

    def _function_chain(self, function: Optional[AstFunction]) -> Iterator[AstFunction]:
        while function is not None:
            yield function
            function = self.index.function_of(function)

    # --- whole functions ---------------------------------------------------------------------
    def _check_function(self, node: Def, pytest_file: bool) -> bool:
        """True when the function is settled: reported, or known to run without autograd."""
        index, name = self.index, node.name
        decorators = decorator_names(node)
        if decorated_grad_off(node):
            return True
        if any("register" in d.lower() for d in decorators):
            return True  # a registered factory (`@register_model def test_resnet(...)`): it builds, not runs
        if called_without_grad(index, name):
            return True
        if _FRAMEWORK_NO_GRAD.search(name):
            return True
        if _HOOK_NAME.search(name):
            return False
        words = name.strip("_").lower().split("_")
        if pytest_file and name.lstrip("_").startswith("test"):
            return True  # a test or test helper (`test_roi_heads`, `_test_eval`, unittest's `testKeypointHead`)
        if words[0] == "test" and not _has_params(node):
            return False  # a pytest test
        if any(call_name(c.node) == "enter_context" and _NO_GRAD_TEXT.search(self._call_text(c.node))
               for c in index.calls_in(node)):
            return True  # `stack.enter_context(torch.no_grad())`: the rest of the function runs without autograd
        if self._only_passed_along(node):
            return True  # `inference_on_dataset(eval_wrapper, ...)`: the code it is handed to sets grad mode
        own_calls = self._own_calls(node)
        eval_receivers, switches_mode = self._eval_switches(node, own_calls)
        if switches_mode:  # model.train() in here too, or eval() only on some path: a mixed function
            return False
        named = words[0] in _EVAL_WORDS or words[-1] in _EVAL_WORDS or words[0] == "test"
        eval_loader = any(isinstance(loop, (ast.For, ast.AsyncFor)) and is_eval_loader(loop.iter)
                          for loop in self._loops_of(node))
        called = {dotted_name(c.func) for c in own_calls}
        model_receivers = {r for r in eval_receivers
                           if r == "self" or looks_like_model(r.split(".")[-1]) or r in called}
        class_name = self._class_name(node)
        if not (model_receivers or eval_loader or (named and class_name is None)):
            return False
        text = self._text(node)
        if _GRAD_TEXT.search(text) or any(index.is_optimizer_step(c, node) for c in own_calls):
            return False
        if any(self._runs_grad_code(c, class_name) for c in own_calls):
            return False  # it trains through a helper of this file: no_grad here would reach that helper too
        model_calls = [c for c in own_calls
                       if self._is_model_call(c, eval_receivers, node) and not grad_off_between(index, c, node)]
        if not model_calls:
            return False
        if self._caller_wants_grad(name) or self._called_by_hand(node):
            return True
        model = dotted_name(model_calls[0].func) or "the model"
        torch_name = self.alias or "torch"
        rewrite = None
        if isinstance(node, ast.AsyncFunctionDef) or _AWAIT_TEXT.search(text):
            message = (f"`{name}()` evaluates `{model}(...)` with autograd on; "
                       f"run the model calls inside `with {torch_name}.no_grad():`")
        else:
            message = (f"`{name}()` evaluates `{model}(...)` with autograd on; "
                       f"decorate it with `@{torch_name}.no_grad()`")
            if not _GENERATOR_TEXT.search(text) or self.ctx.torch_version >= (2, 0):
                rewrite = Rewrite(_decorate, message + " ({reason})", block=node, reads=node)
            else:
                message += " (no fix for a generator before PyTorch 2.0)"
        self.ctx.report(index.definition_name(node), message=message, rewrite=rewrite)
        return True

    # --- loops outside evaluation functions ----------------------------------------------------
    def _check_loop(self, loop: ast.For, function: Optional[AstFunction]) -> bool:
        index = self.index
        if grad_off_anywhere_around(index, loop) or ends_after_first_iteration(loop):
            return False  # (a loop that leaves after its first batch runs the model once)
        receivers = self._preceding_eval(loop, function)
        if receivers is None:  # the model is put back into train mode just before: not an eval loop
            return False
        if not receivers and not is_eval_loader(loop.iter):
            return False
        text = self._text(loop)
        if _GRAD_TEXT.search(text):
            return False
        calls = [c.node for statement in loop.body for c in index.calls_in(statement) if c.function is function]
        if any(index.is_optimizer_step(c, function) for c in calls):
            return False
        class_name = self._class_name(function) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if any(self._runs_grad_code(c, class_name) for c in calls):
            return False  # the loop trains through a helper of this file (`fit_one_epoch(...)`)
        # eval() inside the loop body counts too
        receivers = receivers | {r for r in (self._eval_receiver(c, function) for c in calls) if r}
        model_calls = [c for c in calls
                       if self._is_model_call(c, receivers, function) and not grad_off_between(index, c, loop)]
        if not model_calls:
            return False
        if function is not None:
            name = "<lambda>" if isinstance(function, ast.Lambda) else function.name
            if called_without_grad(index, name) or self._caller_wants_grad(name):
                return False
        model = dotted_name(model_calls[0].func) or "the model"
        torch_name = self.alias or "torch"
        message = (f"evaluation loop calls `{model}(...)` with autograd on; "
                   f"wrap it in `with {torch_name}.no_grad():`")
        rewrite = None
        if not _GENERATOR_TEXT.search(text) and not _AWAIT_TEXT.search(text):
            rewrite = Rewrite(_wrap_loop, message + " ({reason})", block=loop, reads=loop)
        self.ctx.report(loop.iter, message=message, rewrite=rewrite)
        return True

    def _called_by_hand(self, function: Def) -> bool:
        """A notebook's def with no loop of its own that the notebook calls only a few times, each call in no
        loop and no def (`predict_sentiment(model, "I love this movie")` in a cell): its graph is built a few
        times per run, which costs nothing worth a finding. (A notebook is imported by no other file.)"""
        if not self.ctx.path.endswith(".ipynb") or self._loops_of(function) or self.index.function_of(function):
            return False
        index = self.index
        calls = [info for info in index.calls_by_name.get(function.name, ()) if type(info.node.func) is ast.Name]
        if not 0 < len(calls) <= _BY_HAND_CALLS or len(calls) != len(index.calls_by_name[function.name]) \
                or any(info.function is not None or info.loop is not None or any(
                    type(above) in COMPREHENSIONS for above in index.ancestors(info.node)) for info in calls):
            return False
        # and the name is used nowhere else (`map(predict, sentences)`, a table of functions)
        return len(index.names_named(function.name)) == len(calls)

    def _preceding_eval(self, loop: ast.For, function: Optional[AstFunction]) -> Optional[Set[str]]:
        """Receivers of ``X.eval()`` statements before the loop in its block; None if ``X.train()`` comes last.
        A line of simple statements (``m.train(); m.eval()``) is read left to right, the lines last first."""
        block = self.index.block_of.get(loop, [])
        position = next((i for i, statement in enumerate(block) if statement is loop), None)
        if position is None:
            return set()
        lines: List[List[ast.stmt]] = []
        for statement in block[:position]:
            if type(statement) in _COMPOUND:
                lines.append([])
            elif lines and lines[-1] and lines[-1][-1].end_lineno == statement.lineno:
                lines[-1].append(statement)
            else:
                lines.append([statement])
        receivers: Set[str] = set()
        for line in reversed(lines):
            for statement in line:
                if isinstance(statement, (ast.Expr, ast.Assign)) and isinstance(statement.value, ast.Call):
                    receiver = self._eval_receiver(statement.value, function)
                    if receiver:
                        receivers.add(receiver)
                    elif self._train_receiver(statement.value, function):
                        return receivers or None
        return receivers

    # --- facts -----------------------------------------------------------------------------
    def _plain(self, expr: ast.expr, scope: Optional[AstFunction]) -> Optional[dict]:
        """``expr`` (a name, ``self.<attribute>``, a class's call) is an instance of classes that derive from no
        ``nn.Module`` (of this file or, through the project model, another's: ``env = Env(args)`` with a plain
        ``class Env:``; ``facts.modules.plain_instance``): their methods and the ``train``/``eval`` ones that
        make calls (``modal``), else None. ``self`` is never one: a plain mixin's ``self`` may be a Module."""
        return plain_instance(self.index, instance_classes(self.index, expr, scope, none_too=True), self.ctx.project)

    def _switches(self, call: ast.Call, scope: Optional[AstFunction]) -> bool:
        """``x.eval()`` / ``x.train(...)`` may switch a module's mode: unless ``x`` is an instance of a plain
        class (``_plain``) whose method of that name makes no call (``def eval(self): self.training = False``)."""
        func = call.func
        if not isinstance(func, ast.Attribute):
            return False
        plain = self._plain(func.value, scope)
        return plain is None or func.attr in plain["modal"]

    def _eval_receiver(self, call: ast.Call, scope: Optional[AstFunction]) -> Optional[str]:
        receiver = eval_receiver(self.index, call)
        return receiver if receiver is not None and self._switches(call, scope) else None

    def _train_receiver(self, call: ast.Call, scope: Optional[AstFunction]) -> Optional[str]:
        receiver = train_receiver(self.index, call)
        return receiver if receiver is not None and self._switches(call, scope) else None

    def _class_name(self, function: Def) -> Optional[str]:
        klass = self.index.class_of.get(function)
        return klass.name if klass is not None else None

    def _own_calls(self, function: Def) -> List[ast.Call]:
        return [c.node for c in self.index.calls_in(function) if c.function is function]

    def _eval_switches(self, function: Def, calls: List[ast.Call]) -> Tuple[Set[str], bool]:
        """(receivers of unconditional eval() calls, whether the function also switches modes otherwise)."""
        receivers: Set[str] = set()
        mixed = False
        for call in calls:
            if self._train_receiver(call, function):
                mixed = True
            receiver = self._eval_receiver(call, function)
            if receiver is None:
                continue
            for ancestor in self.index.ancestors(call):
                if ancestor is function:
                    break
                if isinstance(ancestor, _BRANCHES):
                    mixed = True
            receivers.add(receiver)
        return receivers, mixed

    def _is_model_call(self, call: ast.Call, receivers: Set[str], scope: Optional[AstFunction]) -> bool:
        index = self.index
        func = call.func
        name = dotted_name(func)
        if name is None:
            return False
        if name in receivers:
            return True
        owner, _, last = name.rpartition(".")
        plain = self._plain(func.value if isinstance(func, ast.Attribute) else func, scope)
        if plain is not None:  # an instance of a class that derives from no nn.Module
            if isinstance(func, ast.Attribute) and owner in receivers and _may_run(last):
                return True  # its eval() put the modules it holds in eval mode: `agent.eval()`, `agent.act(obs)`
            if not isinstance(func, ast.Attribute) or last in plain["methods"]:
                return False  # the instance itself, or one of its methods: its name says nothing (`helper.ema(m)`)
        if owner and last == "forward" and (owner in receivers or looks_like_model(owner.split(".")[-1])):
            return True
        if owner and isinstance(func, ast.Attribute) and self._not_a_forward(call, last):
            return False
        qualified = index.qualified_name(func)
        if qualified is not None and qualified.split(".")[0] in {"torch", "numpy", "torchvision", "math"}:
            return False
        if isinstance(func, ast.Name) and func.id[:1].isupper() and (
                func.id in index.imports or func.id in self._top_level_classes or _CLASS_NAME.match(func.id)):
            return False  # `Encoder(...)` builds a module; running it is a call of what it returns
        if owner and owner in receivers and isinstance(func, ast.Attribute) and _may_run(last):
            return True  # `agent.eval()` then `agent.get_action(obs)`
        if isinstance(func, ast.Name) and self._bound_to_model(func.id, scope):
            return True
        if isinstance(func, ast.Name) and any(
                index.class_of.get(f) is None and decorated_grad_off(f) for f in index.functions_named(func.id)):
            return False  # `score_network(...)`, a helper of this file decorated with no_grad: not a model
        if isinstance(func, ast.Name) and self._runs_model_argument(call, func.id, receivers, scope):
            return True
        return looks_like_model(last)

    def _not_a_forward(self, call: ast.Call, method: str) -> bool:
        """``model.<method>(...)`` the code shows is no forward pass: a statement of its own with no
        arguments (``generator.remove_weight_norm()``: a change to the module, whose result, if any, is
        dropped), or a method whose every definition in the file's classes runs no module (no call through
        ``self``, ``super()`` or one of its parameters: ``def square_mask(self, n): return torch.triu(...)``)."""
        if not call.args and not call.keywords and isinstance(self.index.parent(call), ast.Expr):
            return True
        methods = self._methods.get(method)
        if methods is None:
            methods = self._methods[method] = [
                f for f in self.index.functions_named(method) if self.index.class_of.get(f) is not None]
        return bool(methods) and not any(_runs_a_module(self.index, f) for f in methods)

    def _runs_model_argument(self, call: ast.Call, name: str, receivers: Set[str],
                             scope: Optional[AstFunction]) -> bool:
        """``greedy_decode(model, src)``: a function of this file given the model, which calls it."""
        index = self.index
        helper = next((f for f in index.functions_named(name) if index.class_of.get(f) is None), None)
        if helper is None:
            return False
        params = [arg.arg for arg in helper.args.args]
        for place, (star, keyword, value) in enumerate(_arguments(call)):
            if star or not isinstance(value, ast.Name):
                continue
            given = value.id
            if not (given in receivers or looks_like_model(given) or self._bound_to_model(given, scope)):
                continue
            if given not in receivers and self._plain(value, scope) is not None:
                continue  # an instance of a class that derives from no nn.Module
            param = keyword if keyword is not None else (params[place] if place < len(params) else None)
            if param is None or decorated_grad_off(helper):
                continue
            if any(_runs(c.node, param) and not grad_off_between(index, c.node, helper)
                   for c in index.calls_in(helper)):
                return True
        return False

    def _bound_to_model(self, name: str, scope: Optional[AstFunction]) -> bool:
        index = self.index
        value = index.single_value(name, scope)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda", "eval"):
            value = value.func.value  # `Generator(...).to(device)`
        if not isinstance(value, ast.Call):
            return False
        if _MODEL_FACTORIES.search(index.qualified_name(value.func) or ""):
            return True
        if not isinstance(value.func, ast.Name):
            return False
        built = value.func.id
        # a class of this file that subclasses nn.Module, or a model-named class (`GeneratorResNet(...)`)
        return built in self.model_classes or (built[:1].isupper() and looks_like_model(built))

    def _caller_wants_grad(self, name: str, seen: Optional[Set[str]] = None) -> bool:
        """A call of ``name`` in a training step, directly or through other functions of this file (a helper
        called by the loss function): its output may be differentiated."""
        index = self.index
        seen = set() if seen is None else seen
        if name in seen:
            return False
        seen.add(name)
        if self._returns_nothing(name):
            return False  # `sample_images()` saving a grid: nothing reaches the caller to differentiate
        for info in index.calls_by_name.get(name, ()):
            if index.training_loop_of(info) is not None:
                return True
            loops = [loop.node for loop in index.enclosing_loops(info.node)]
            for backward in self._backwards_in(info.function):
                if (source_order(info.node) < source_order(backward.node)
                        and index.is_backward_call(backward.node)
                        and [loop.node for loop in index.enclosing_loops(backward.node)] == loops):
                    return True
            caller = info.function
            if caller is not None and not isinstance(caller, ast.Lambda) and self._caller_wants_grad(caller.name, seen):
                return True
        return False

    def _loops_of(self, function: AstFunction) -> List[ast.AST]:
        """The loops ``function`` runs itself (``LoopInfo.function``), in source order."""
        if self._loops_by_function is None:
            self._loops_by_function = {}
            for loop in self.index.loops:
                self._loops_by_function.setdefault(loop.function, []).append(loop.node)
        return self._loops_by_function.get(function, [])

    def _backwards_in(self, function: Optional[AstFunction]) -> List[AstCallInfo]:
        """The calls named ``backward`` that ``function`` (None: the module) runs itself, in source order."""
        if self._backwards_by_function is None:
            self._backwards_by_function = {}
            for backward in self.index.calls_by_name.get("backward", ()):
                self._backwards_by_function.setdefault(backward.function, []).append(backward)
        return self._backwards_by_function.get(function, [])

    def _runs_grad_code(self, call: ast.Call, class_name: Optional[str]) -> bool:
        """``call`` runs a function of this file that computes gradients (``backward()``, an optimizer step,
        ``torch.autograd.grad``...), directly or through the file's other functions: ``fit_head(...)`` or
        ``self.train_epoch()``. A no_grad decorator or block around the call would reach that code too."""
        target = _called_function_key(call, class_name)
        return target is not None and target in self._grad_functions()

    def _grad_functions(self) -> Set[Tuple[str, Optional[str]]]:
        """(name, class) of the file's functions that compute gradients or call one that does."""
        if self._wants_grad is not None:
            return self._wants_grad
        index = self.index
        functions = index.functions
        own = {f: self._own_calls(f) for f in functions}
        key = {f: (f.name, self._class_name(f)) for f in functions}
        wanting = {key[f] for f in functions
                   if _COMPUTES_GRAD_TEXT.search(self._text(f)) or any(index.is_optimizer_step(c, f) for c in own[f])}
        changed = True
        while changed:  # through helpers: a driver calling `fit_one_epoch()` that calls `backward_step()`
            changed = False
            for f in functions:
                if key[f] not in wanting and any(_called_function_key(c, key[f][1]) in wanting for c in own[f]):
                    wanting.add(key[f])
                    changed = True
        self._wants_grad = wanting
        return wanting

    def _only_passed_along(self, function: Def) -> bool:
        """The function is never called in this file, only handed to another call as an argument."""
        index, name = self.index, function.name
        if index.calls_by_name.get(name):
            return False
        parent = index.function_of(function)
        if parent is not None and name in self._returned_names(parent):
            return True  # a closure returned to the caller, who decides the grad mode it runs in
        if self._passed_names is None:  # once per file: a file with many functions asks for each
            self._passed_names = {value.id for info in index.calls for _, _, value in _arguments(info.node)
                                  if isinstance(value, ast.Name)}
        return name in self._passed_names

    def _returned_names(self, node: ast.AST) -> Set[str]:
        """The names ``node`` returns bare (``return inner``), walked once per function: a function holding
        many closures asked for each."""
        names = self._returned.get(node)
        if names is None:
            names = self._returned[node] = {r.value.id for r in walk(node)
                                            if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)}
        return names

    def _returns_nothing(self, name: str) -> bool:
        """The file's only function ``name`` hands nothing back: no ``return <value>``, no ``yield``, no
        stores into attributes, items, globals or lists it did not create."""
        functions = self.index.functions_named(name)
        if len(functions) != 1:
            return False
        for statement in functions[0].body:
            for inner in ast.walk(statement):  # not the index's walk: it leaves out `global` and `nonlocal`
                if isinstance(inner, ast.Return) and inner.value is not None:
                    return False
                if isinstance(inner, (ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal, ast.AugAssign)):
                    return False
                if isinstance(inner, ast.Assign) and any(not isinstance(t, (ast.Name, ast.Tuple, ast.List))
                                                         for t in inner.targets):
                    return False
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in {
                        "append", "extend", "update", "copy_", "insert", "put", "setdefault", "add_"}:
                    return False
        return True

    def _text(self, node: ast.stmt) -> str:
        text = self._text_cache.get(node)
        if text is None:
            text = self._text_cache[node] = self.index.owned_text(node)
        return text

    def _call_text(self, call: ast.Call) -> str:
        return self.index.source_segment(call)


# --- the fixes, made on LibCST's tree -------------------------------------------------------------
def _decorate(node: cst.FunctionDef, a: FileAnalysis) -> Union[Fix, str]:
    """``@torch.no_grad()`` as the def's innermost decorator."""
    decorator = cst.Decorator(decorator=cst.parse_expression(f"{a.module_alias('torch') or 'torch'}.no_grad()"))
    new = node.with_changes(decorators=[*node.decorators, decorator])
    return Fix.replace(node, new, Applicability.SAFE, _imports(a))


def _wrap_loop(loop: cst.For, a: FileAnalysis) -> Union[Fix, str]:
    """The loop inside ``with torch.no_grad():``, its leading comments kept above."""
    with_node = cst.With(
        items=[cst.WithItem(item=cst.parse_expression(f"{a.module_alias('torch') or 'torch'}.no_grad()"))],
        body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=[])]),
        leading_lines=loop.leading_lines,
    )
    return Fix.replace(loop, with_node, Applicability.SAFE, _imports(a))


def _imports(a: FileAnalysis) -> Tuple[ImportRequest, ...]:
    return () if a.module_alias("torch") else (ImportRequest("torch"),)


_NOT_A_RUN = {"eval", "train", "to", "cuda", "cpu", "parameters", "named_parameters", "state_dict", "modules",
              "load_state_dict", "zero_grad", "apply", "children", "named_modules", "buffers", "half", "float",
              "generate", "register_forward_hook", "requires_grad_", "share_memory", "fuse_model", "type",
              "items", "keys", "values", "named_children", "named_buffers"}  # HF generate() is no-grad itself


# First words of methods that change or prepare a module rather than run it.
_SETUP_WORDS = {"convert", "to", "load", "save", "init", "initialize", "register", "set", "fuse", "compile", "export",
                "prepare", "freeze", "unfreeze", "reset", "half", "float", "cuda", "cpu", "tie", "resize"}


def _called_function_key(call: ast.Call, class_name: Optional[str]) -> Optional[Tuple[str, Optional[str]]]:
    """(name, class) of the file's function ``call`` may run: ``helper(...)``, or ``self.method(...)`` in a
    method of ``class_name``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id, None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return func.attr, class_name
    return None


def _runs_a_module(index: AstIndex, method: Def) -> bool:
    """The method may run a module: it calls something through ``self`` (``self.encoder(x)``,
    ``self.encode(x)``), ``super()``, or one of its parameters."""
    params = {arg.arg for arg in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs)}
    for info in index.calls_in(method):
        root = info.node.func
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name) and (root.id in params or root.id == "super"):
            return True
    return False


def _runs(call: ast.Call, param: str) -> bool:
    """``param(...)`` or ``param.decode(...)``: a forward pass of the module bound to ``param``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == param
    return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == param
            and _may_run(func.attr))


def _may_run(method: str) -> bool:
    """A method of a module that may run its forward pass: not one of ``_NOT_A_RUN`` nor one named as a
    conversion or set-up step (``convert_to_fp16``, ``load_weights``, ``set_mode``, ``init_cache``)."""
    return method not in _NOT_A_RUN and method.lstrip("_").split("_")[0] not in _SETUP_WORDS


def _has_params(node: Def) -> bool:
    args = node.args
    return bool(args.posonlyargs or args.args or args.kwonlyargs or args.vararg or args.kwarg)


def _arguments(call: ast.Call) -> List[Tuple[bool, Optional[str], ast.expr]]:
    """(starred, keyword, value) of each argument in source order, as LibCST's ``Call.args`` lists them."""
    found = [((a.lineno, a.col_offset), type(a) is ast.Starred, None, a.value if type(a) is ast.Starred else a)
             for a in call.args]
    found += [((k.value.lineno, k.value.col_offset), k.arg is None, k.arg, k.value) for k in call.keywords]
    found.sort(key=lambda entry: entry[0])
    return [(star, keyword, value) for _, star, keyword, value in found]
