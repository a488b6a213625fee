"""TL602: deterministic algorithms forced on every run of a training script."""

from __future__ import annotations

import ast
import re
from typing import Iterator

from torchlint.facts.index import AstIndex, call_arguments, is_literal, keyword_value, walk
from torchlint.config import Settings
from torchlint.facts.script import first_training_loop, runs_on_every_run
from torchlint.rule import IndexContext, Rule
from torchlint.facts.text_gates import CALL_GAP, TRAINING_WORDS, may_train, search_method, statement_end

# The text gate: `use_deterministic_algorithms` named, or an assignment to a `.deterministic` whose statement
# says `True` (`cudnn.deterministic = cudnn.benchmark = True`), however spaced (see text_prefilter).
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

    text_gate = (("deterministic",), ("True",), TRAINING_WORDS)

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        if "deterministic" not in text or "True" not in text:
            return False
        # the function's name, not its call: an import spells it where an alias calls it (`uda(True)`)
        return ("use_deterministic_algorithms" in text or _sets_deterministic_true(text)) and may_train(text)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if first_training_loop(index) is None:
            return
        for node in _deterministic_settings(index):
            if runs_on_every_run(index, node):
                ctx.report(node)


def _deterministic_settings(index: AstIndex) -> Iterator[ast.AST]:
    """``cudnn.deterministic = True`` statements and ``use_deterministic_algorithms(True)`` calls."""
    for info in index.calls_to("torch.use_deterministic_algorithms"):  # aliases included
        call = info.node
        mode = keyword_value(call, "mode")
        if mode is None:
            arguments = call_arguments(call)
            mode = arguments[0][1] if arguments and arguments[0][0] is None else None
        if mode is not None and is_literal(mode, True):
            yield call
    for node in walk(index.tree):  # only files that set it get here
        if type(node) is ast.Assign and is_literal(node.value, True):
            for target in node.targets:
                if (isinstance(target, ast.Attribute) and target.attr == "deterministic"
                        and index.qualified_name(target.value) == _CUDNN):
                    yield node
