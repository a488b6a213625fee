"""TL703: fp16/bf16 layers whose sizes are not multiples of 8, which tensor-core matmuls want."""

from __future__ import annotations

import ast
import re
from typing import Dict, List, Optional, Set, Tuple

from torchlint.facts.index import AstIndex, AstScope, StatementLine, dotted_name, keyword_value, walk
from torchlint.config import Settings
from torchlint.facts.devices import reduced_precision_evidence
from torchlint.rule import FixAvailability, IndexContext, Rule
from torchlint.facts.text_gates import GAP, search_method, search_word

# Sizes below this are cheap layers (a 10-class head, a 3-channel input): padding them gains nothing worth
# the change, so they are never reported.
MIN_DIM = 64
ALIGN = 8
# (argument position, keyword) of each size that becomes a matmul dimension.
_LINEAR_DIMS = ((0, "in_features"), (1, "out_features"))
_EMBEDDING_DIMS = ((0, "num_embeddings"), (1, "embedding_dim"))
# The layers, as words: `\b(?:Linear|Embedding)\b`, searched with `search_word` (a literal prefix is fast).
_LAYER_TEXTS = (re.compile(r"Linear\b"), re.compile(r"Embedding\b"))
# `.half()`, `torch.half` (however spaced: `x . half()`), or the name `half` in a file that imports from
# torch (`from torch import (float32,\n    half)`): with autocast, GradScaler and the dtypes, the text of a
# reduced precision (see `_may_be_reduced`).
_HALF_TEXT = re.compile(r"half\b")  # with search_method (an attribute) or search_word (a name)
_FROM_TORCH_IMPORT_TEXT = re.compile(r"from" + GAP + r"torch\b[\w.\s\\]*import\b")  # with search_word


# Decimal integers (`_` separators allowed), or any hex/octal/binary literal (not worth decoding: "maybe").
_INTEGER_TEXT = re.compile(r"(?<![\w.])(?:(0[xXoObB][0-9a-fA-F_]+)|([1-9][0-9_]*))(?![\w.])")


def _may_be_reduced(text: str) -> bool:
    """The text may compute in fp16/bf16. Plain substring tests first: every match holds one of them."""
    if "autocast" in text or "GradScaler" in text or "float16" in text:  # `bfloat16` holds `float16`
        return True
    if "half" not in text:
        return False
    if search_method(_HALF_TEXT, text):
        return True
    return search_word(_HALF_TEXT, text) is not None and search_word(_FROM_TORCH_IMPORT_TEXT, text) is not None


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class UnalignedFp16MatmulDims(Rule):
    """## What it does
    Flags `nn.Linear` and `nn.Embedding` layers whose sizes, as written in the file (a literal, a name bound
    to one, or a config class's default such as `vocab_size: int = 50257`), are not multiples of 8, in a
    file that itself runs in fp16 or bf16 (autocast, a GradScaler, `.half()`/`.bfloat16()`, a reduced
    `dtype=`). For `nn.Linear` both `in_features` and `out_features` count (they are the K and N of the
    matmul); for `nn.Embedding` the `embedding_dim` counts, and `num_embeddings` only where the file ties
    an embedding's weight to an output layer (`self.lm_head.weight = self.wte.weight`), which makes the
    vocabulary a matmul dimension. Sizes below 64 are ignored (small heads and inputs cost little), and so
    are test files and sizes the file does not spell out (read from a tokenizer, a flag, a checkpoint).

    ## Why is this slow?
    fp16/bf16 tensor-core GEMMs in cuBLAS need the matrix dimensions (and the leading dimensions in memory)
    to be multiples of 8 elements (16 bytes) to use their fastest kernels; otherwise cuBLAS falls back to
    slower kernels or pads internally. The classic case is GPT-2's vocabulary of 50257 tokens: the output
    projection (`hidden @ wte.weight.T`) is the largest matmul of a small GPT, and padding the vocabulary to
    50304 (a multiple of 64) made nanoGPT's training step about 25% faster. PyTorch's profiler reports these
    matmuls as the "Matrix Multiplication Dimension Not Aligned Pattern".

    ## Example
    ```python
    class GPT(nn.Module):
        def __init__(self, n_embd=768, vocab_size=50257):
            super().__init__()
            self.wte = nn.Embedding(50257, 768)
            self.lm_head = nn.Linear(768, 50257, bias=False)
            self.wte.weight = self.lm_head.weight

    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
    ```

    ## Use instead
    ```python
    self.wte = nn.Embedding(50304, 768)  # 50257 padded to a multiple of 64
    self.lm_head = nn.Linear(768, 50304, bias=False)
    ```

    ## Fix safety
    There is no fix: padding a layer is a model change. The extra rows of a padded vocabulary are tokens no
    tokenizer produces: they get (small) probability in the softmax unless their logits are masked or
    sliced off (`logits[..., :50257]`) before the loss and sampling; in practice training learns to push
    them down, as nanoGPT does. Checkpoints change shape: loading weights saved with 50257 rows needs
    padding the tensors (`F.pad(w, (0, 0, 0, 47))`) or slicing them on the way back, and exporting to a
    tokenizer-bound format needs the slice. A padded hidden size changes every layer that uses it.

    ## PyTorch versions
    Any version with autocast (1.6+) or `.half()`. The alignment rule comes from cuBLAS/cuDNN tensor cores
    (Volta and newer for fp16, Ampere and newer for bf16); recent cuBLAS versions handle unaligned sizes with
    tensor cores too, but with less efficient kernels, so aligned sizes stay faster.
    """

    code = "TL703"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    name = "unaligned-fp16-matmul-dims"
    message = "fp16/bf16 layer size is not a multiple of 8: tensor-core matmuls run slower kernels"
    summary = "fp16/bf16 nn.Linear/nn.Embedding sizes that are not multiples of 8"
    fix_availability = FixAvailability.NONE

    text_gate = (("autocast", "GradScaler", "float16", "half"), ("Linear", "Embedding"))

    @classmethod
    def may_fire(cls, text: str, settings: Settings) -> bool:
        """Reduced precision and a layer in the text, then some integer literal that would be a reportable
        size (the ast stage's test)."""
        if not (_may_be_reduced(text) and any(search_word(layer, text) for layer in _LAYER_TEXTS)):
            return False
        return any(match.group(1) or _unaligned(int(match.group(2).replace("_", ""))) for match in _INTEGER_TEXT.finditer(text))
    default_enabled = False  # opt-in: padding is a model change a project may have declined (see the docs)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        layers = [info.node for info in index.calls_to("torch.nn.Linear", "torch.nn.Embedding")]  # aliases too
        if not layers or reduced_precision_evidence(index) is None:
            return
        fields = _config_defaults(index)
        tied = _tied_names(index, ctx.source)
        # A tied vocabulary is one weight: report it once, at the output layer, when the file has one.
        linear_outputs = {
            _int_value(index, arg, index.scope_of(call), fields) for call in layers
            if index.qualified_name(call.func) == "torch.nn.Linear"
            for arg in [_argument(call, 1, "out_features")] if arg is not None
        }
        for call in layers:
            is_linear = index.qualified_name(call.func) == "torch.nn.Linear"
            problems = []
            for position, keyword in _LINEAR_DIMS if is_linear else _EMBEDDING_DIMS:
                if keyword == "num_embeddings" and _layer_name(index, call) not in tied:
                    continue  # an untied embedding lookup is a gather, not a matmul
                arg = _argument(call, position, keyword)
                value = _int_value(index, arg, index.scope_of(call), fields) if arg is not None else None
                if keyword == "num_embeddings" and value in linear_outputs:
                    continue
                if value is not None and _unaligned(value):
                    problems.append(f"{keyword}={value} (pad to {_suggestion(value)})")
            if problems:
                layer = "nn.Linear" if is_linear else "nn.Embedding"
                message = (
                    f"`{layer}` runs in fp16/bf16 in this file with {' and '.join(problems)}, not a multiple of "
                    f"{ALIGN}: tensor-core matmuls take slower kernels on unaligned sizes; padding changes the "
                    f"checkpoint's shapes (see `torchlint explain {self.code}`)"
                )
                ctx.report(call, message=message)


def _unaligned(value: int) -> bool:
    return value >= MIN_DIM and value % ALIGN != 0


def _suggestion(value: int) -> str:
    eight = round_up(value, ALIGN)
    sixty_four = round_up(value, 64)
    if value >= 1024 and sixty_four != eight:
        return f"{eight}, or {sixty_four}, a multiple of 64"
    return str(eight)


def _argument(call: ast.Call, position: int, keyword: str) -> Optional[ast.expr]:
    """The ``keyword=`` argument's value, else the position-th positional argument that is not ``*args``."""
    found = keyword_value(call, keyword)
    if found is not None:
        return found
    positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
    return positional[position] if position < len(positional) else None


def _int_value(index: AstIndex, expr: ast.expr, scope: AstScope, fields: Dict[str, int], depth: int = 0) -> Optional[int]:
    """The integer a size expression certainly is, from the file alone; None where it cannot be read."""
    if depth > 4:
        return None
    if type(expr) is ast.Constant:
        return expr.value if type(expr.value) is int else None  # type: ignore[attr-defined]
    if isinstance(expr, ast.Name):
        value, where = index.single_value_and_scope(expr.id, scope)
        return _int_value(index, value, where, fields, depth + 1) if value is not None else None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, (ast.Name, ast.Attribute)):
        # `config.vocab_size`: the default of a config class's field, when the file has exactly one.
        return fields.get(expr.attr)
    return None


def _config_defaults(index: AstIndex) -> Dict[str, int]:
    """Integer defaults of class-level fields (`vocab_size: int = 50257`), for names with one value in the
    file. A name with several values, or one also assigned elsewhere (`config.vocab_size = ...`), is dropped.
    A class whose body follows its header on one line (`class C: n = 1`) has no fields to read."""
    values: Dict[str, Set[int]] = {}
    for klass in (node for node in walk(index.tree) if type(node) is ast.ClassDef):
        if not klass.body or not isinstance(index.statement_line(klass.body[0]), StatementLine):
            continue
        for statement in klass.body:
            target, value = _simple_assignment(statement)
            if target is not None and type(value) is ast.Constant and type(value.value) is int:
                values.setdefault(target, set()).add(value.value)
    reassigned = {target.attr for target, _ in _assignments(index) if isinstance(target, ast.Attribute)}
    return {name: next(iter(found)) for name, found in values.items() if len(found) == 1 and name not in reassigned}


def _simple_assignment(statement: ast.stmt) -> Tuple[Optional[str], Optional[ast.expr]]:
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return statement.target.id, statement.value
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id, statement.value
    return None, None


def _assignments(index: AstIndex) -> List[Tuple[ast.expr, Optional[ast.expr]]]:
    """Every assignment target of the file, with the value where it is a plain ``=``."""
    found: List[Tuple[ast.expr, Optional[ast.expr]]] = []
    for node in walk(index.tree):
        if type(node) is ast.Assign:
            found.extend((target, node.value) for target in node.targets)
        elif type(node) in (ast.AnnAssign, ast.AugAssign):
            found.append((node.target, None))
    return found


_WEIGHT = re.compile(r"\.weight$")


def _tied_names(index: AstIndex, source: str) -> Set[str]:
    """Last names of the layers in ``self.lm_head.weight = self.transformer.wte.weight`` (both sides)."""
    names: Set[str] = set()
    if ".weight" not in source:
        return names
    for target, assigned in _assignments(index):
        written = dotted_name(target)
        value = dotted_name(assigned) if assigned is not None else None
        if written is None or value is None or "." not in value or not (_WEIGHT.search(written) or _WEIGHT.search(value)):
            continue
        for side in (written, value):
            parts = side.split(".")
            if len(parts) >= 2:
                names.add(parts[-2])
    return names


def _layer_name(index: AstIndex, call: ast.Call) -> Optional[str]:
    """``wte`` for ``self.wte = nn.Embedding(...)`` or ``dict(wte=nn.Embedding(...))``."""
    parent = index.parent(call)
    if isinstance(parent, ast.keyword) and parent.arg is not None:
        return parent.arg
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        written = dotted_name(parent.targets[0])
        return written.split(".")[-1] if written else None
    return None
