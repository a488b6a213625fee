"""TL602: deterministic algorithms forced on every run of a training script."""

from __future__ import annotations

import ast
import re

import libcst as cst

from torchlint.analysis import FileAnalysis, is_literal, keyword_arg
from torchlint.config import Settings
from torchlint.rule import Rule, RuleContext
from torchlint.script_facts import TRAINING_WORDS, ast_call_name, ast_has_training_loop, may_train, runs_on_every_run
from torchlint.text_prefilter import CALL_GAP, call_with_text, search_method, statement_end

# The text stage: `use_deterministic_algorithms(` with a `True` in its arguments, or an assignment to a
# `.deterministic` whose statement says `True` (`cudnn.deterministic = cudnn.benchmark = True`), however
# spaced (see text_prefilter).
_USE_DETERMINISTIC_TEXT = call_with_text("use_deterministic_algorithms", "True")
_DETERMINISTIC_ASSIGN_TEXT = re.compile(r"deterministic" + CALL_GAP + r"=(?!=)")  # with search_method


def _sets_deterministic_true(text: str) -> bool:
    """An assignment to a ``.deterministic`` whose statement says ``True``."""
    match = search_method(_DETERMINISTIC_ASSIGN_TEXT, text)
    while match is not None:
        if "True" in text[match.end():statement_end(text, match.end())]:
            return True
        match = search_method(_DETERMINISTIC_ASSIGN_TEXT, text, match.end())
    return False


_CUDNN = "torch.backends.cudnn"


class CudnnDeterministic(Rule):
    """## What it does
    Flags `torch.backends.cudnn.deterministic = True` and `torch.use_deterministic_algorithms(True)` set
    unconditionally in a training script (a file with a training loop): at module level, in `main()`, or
    in a function this file calls unconditionally.

    Silent where the setting is made under a condition (`if args.deterministic:`, `if seed is not None:`),
    takes a variable (`cudnn.deterministic = args.torch_deterministic`), sits in a helper this file never
    calls (a seeding utility for other files: the caller's condition is not visible), in tests, and in files
    without a training loop.

    This rule is **off by default** (opt in with `--extend-select TL602` or `select = ["ALL"]`): bitwise
    reproducibility is a legitimate goal that a project may have chosen on purpose.

    ## Why is this slow?
    `cudnn.deterministic = True` restricts cuDNN to deterministic convolution algorithms, which are often
    slower (for some layer shapes several times slower, especially backward passes), and it makes
    `cudnn.benchmark` choose among those only. `torch.use_deterministic_algorithms(True)` goes further: every
    op with a non-deterministic CUDA kernel (`index_add_`, `scatter_add_`, `embedding_bag` backward,
    interpolation backward...) switches to a slower deterministic one or raises an error, and cuBLAS needs
    `CUBLAS_WORKSPACE_CONFIG`. Set unconditionally, every training run pays for reproducibility, including
    the long runs where nobody compares bits.

    ## Example
    ```python
    import torch

    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer)
    ```

    ## Use instead
    ```python
    import torch

    torch.manual_seed(args.seed)
    if args.deterministic:  # reproducible runs on request; fast runs by default
        torch.backends.cudnn.deterministic = True
    else:
        torch.backends.cudnn.benchmark = True
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer)
    ```

    ## Fix safety
    No fix: whether a run must be reproducible is the author's decision. Put the setting behind a flag;
    where every run really must be bitwise reproducible, keep it with a `# noqa: TL602`.

    ## PyTorch versions
    `torch.backends.cudnn.deterministic` exists in every supported version. `torch.use_deterministic_algorithms`
    exists since 1.8 (it replaced `torch.set_deterministic`), its `warn_only=` argument since 1.11; with it set,
    cuBLAS needs `CUBLAS_WORKSPACE_CONFIG=:4096:8` (or `:16:8`) on CUDA 10.2 and newer.
    """

    code = "TL602"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "cudnn-deterministic"
    message = (
        "deterministic algorithms are forced on every run: cuDNN and CUDA may only use their (often slower) "
        "deterministic kernels; set this under a reproducibility flag"
    )
    summary = "cudnn.deterministic / use_deterministic_algorithms(True) set unconditionally"
    default_enabled = False
    has_ast_prefilter = True

    text_gate = (("deterministic",), ("True",), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        if "deterministic" not in text or "True" not in text:
            return False
        return (bool(_USE_DETERMINISTIC_TEXT.search(text)) or _sets_deterministic_true(text)) and may_train(text)

    @classmethod
    def may_fire_in_ast(cls, tree: ast.Module, text: str, settings: Settings) -> bool:
        return ast_has_training_loop(tree) and _ast_may_set_deterministic(tree)  # the index first: no walk

    def check(self, ctx: RuleContext) -> None:
        a = ctx.analysis
        if not a.training_loops():
            return
        for node in _deterministic_settings(a):
            if runs_on_every_run(a, node):
                ctx.report(node)


def _deterministic_settings(a: FileAnalysis):
    """``cudnn.deterministic = True`` statements and ``use_deterministic_algorithms(True)`` calls."""
    for call in a.calls_by_name.get("use_deterministic_algorithms", ()):
        if not a.is_qualified(call.func, "torch.use_deterministic_algorithms"):
            continue
        mode = keyword_arg(call, "mode") or (call.args[0] if call.args and call.args[0].keyword is None else None)
        if mode is not None and is_literal(mode.value, "True"):
            yield call
    for node in a.order:  # every node, without a new walk; only files that set it get here
        if type(node) is cst.Assign and is_literal(node.value, "True"):
            for target in node.targets:
                attribute = target.target
                if (isinstance(attribute, cst.Attribute) and attribute.attr.value == "deterministic"
                        and a.is_qualified(attribute.value, _CUDNN)):
                    yield node


def _ast_may_set_deterministic(tree: ast.Module) -> bool:
    """A ``X.deterministic = True`` or ``use_deterministic_algorithms(True)`` (a superset of the above)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is True:
            if any(isinstance(t, ast.Attribute) and t.attr == "deterministic" for t in node.targets):
                return True
        elif isinstance(node, ast.Call) and ast_call_name(node) == "use_deterministic_algorithms":
            return True
    return False

