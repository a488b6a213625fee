"""TL705: attention written by hand, or SDPA given an explicit causal mask, where the fused kernel is there."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Set, Tuple, Union

import libcst as cst

from torchlint.facts.index import AstIndex, call_arguments, call_name, is_literal, keyword_value
from torchlint.fix.comments import DROPS_COMMENT, loses_comment
from torchlint.facts.modules import class_attributes, self_attribute
from torchlint.rule import Applicability, Fix, FixAvailability, IndexContext, Rewrite, Rule

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis

SDPA = "torch.nn.functional.scaled_dot_product_attention"
SDPA_SINCE = (2, 0)
_SOFTMAX = {"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"}
_SOFTMAX_MODULE = "torch.nn.Softmax"
_DROPOUT = {"torch.dropout", "torch.nn.functional.dropout"}
_DROPOUT_MODULE = "torch.nn.Dropout"
_MATMUL = {"torch.matmul", "torch.bmm"}
_EINSUM = "torch.einsum"
# A method that keeps a tensor's values (a dtype round trip around the softmax: `.float()`, `.type_as(q)`).
_CASTS = {"float", "type_as", "to", "half", "bfloat16"}
# What reading a tensor's metadata asks (`weight.type(weight.dtype)`): not a read of the weights' values.
_METADATA = {"dtype", "shape", "device", "ndim"}
_METADATA_METHODS = {"size", "dim"}
_BOOL_COMPARE = (ast.Eq, ast.NotEq, ast.Gt)  # `tril(ones) == 1`, `!= 0`, `> 0`: True on and below the diagonal
_MAX_DEPTH = 12


@dataclass
class _Attention:
    """The parts of a hand-written attention found behind ``weights @ v``."""

    scores: ast.AST  # the `q @ k^T` product
    names: Set[ast.Name]  # the name reads the chain went through
    bound: Set[str]  # the names it went through
    masked: bool = False  # masked_fill before the softmax
    added: bool = False  # a mask or bias added to the scores
    dropout: bool = False
    three_d: bool = False  # a softmax over dim 2: the last only where the scores are a `torch.bmm`
    values_first: bool = False  # `torch.bmm(v, weights^T)`: values and output laid out (B, C, N)


class AttentionNotFused(Rule):
    """## What it does
    Flags two forms of attention that do not reach PyTorch's fused attention kernels:

    1. Attention written by hand: `softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v`, in its common
       spellings (`torch.matmul`, `torch.bmm`, `einsum("...id,...jd->...ij")`, `.transpose(-1, -2)`,
       `.mT`, a scale applied by `*` or `/` on either side, `F.softmax`, `torch.softmax`, `.softmax(-1)`
       or an `nn.Softmax(dim=-1)` module, a `masked_fill` or an added mask before the softmax, dropout
       (`nn.Dropout` or `F.dropout`) after it, a float32 round trip around it (`.float()`, `.to(...)`,
       `.type(scores.dtype)`)), the channels-first form of diffusion U-Nets (queries and keys laid out
       `(B, C, N)`: `torch.bmm(q.permute(0, 2, 1), k)`, a softmax over dim 2 of a `torch.bmm`'s scores, the
       values on the left of the transposed weights, `torch.bmm(v, w.permute(0, 2, 1))`), also split over several statements of one function
       (`att = q @ k.mT * s; att = att.softmax(-1); y = att @ v`, annotated assignments too). Report only.
    2. `F.scaled_dot_product_attention(q, k, v, attn_mask=mask)` where `mask` is certainly causal:
       `torch.tril(torch.ones(T, T, dtype=torch.bool))` (or a float one turned boolean with `.bool()` or
       `== 1`), `torch.triu(torch.full((T, T), float("-inf")), diagonal=1)` or
       `nn.Transformer.generate_square_subsequent_mask(T)`, built in the same function or registered as a
       buffer in `__init__` and sliced `[:, :, :T, :T]` (a float buffer of ones compared after the slice,
       `self.bias[:, :, :T, :T] == 1` or `> 0`, too; `== 0` is its inverse and stays silent).

    Silent where the file names `scaled_dot_product_attention` anywhere in its code (a call, an import,
    `torch.ops.aten.scaled_dot_product_attention`: the hand-written form is then a fallback, a reference
    or a pattern for a compiler to replace, by the author's choice), where the attention weights are used
    for anything but `@ v` (returned, stored, averaged, appended: SDPA does not return them; reading
    their `dtype`, `shape` or `size()` is no such use), where anything else happens between the softmax
    and `@ v` (a head mask, a re-normalisation), where the
    scores are the sum of two products (the absorbed form of multi-head latent attention, which keeps the
    keys compressed on purpose), for a softmax over another dimension, in test files, and for a
    `torch-version` before 2.0.

    ## Why is this slow?
    The hand-written form runs four to six kernels and materialises the `(B, heads, L, S)` score and
    weight tensors in memory, twice with dropout, and autograd keeps them for the backward pass.
    `F.scaled_dot_product_attention` picks a fused kernel (FlashAttention-2, memory-efficient attention,
    cuDNN) that computes the same in one pass over tiles without storing the weights: nanoGPT's iteration
    went from 143 to 113 ms on an A100 when it switched (PyTorch blog, 2023-04), and memory falls from
    quadratic to linear in the sequence length.

    An explicit `attn_mask` makes SDPA fall back to a kernel that reads the mask (FlashAttention takes
    none): with a causal mask, `is_causal=True` computes the same masking from the indices and keeps the
    fastest kernel.

    ## Example
    ```python
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    att = self.attn_dropout(att)
    y = att @ v

    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    ```

    ## Use instead
    ```python
    y = F.scaled_dot_product_attention(
        q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)

    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ```

    What to check before replacing hand-written attention (the message names the parts it found):
    - the scale: SDPA's default is `1 / sqrt(E)`, E the query's last dimension; pass `scale=` for any
      other (torch >= 2.1);
    - dropout: `dropout_p` is applied whenever it is above 0, in `eval()` too: pass
      `p if self.training else 0.0`;
    - the mask: a boolean `attn_mask` is True where a query may attend (the inverse of the mask
      `masked_fill` takes: pass `~mask`); a float `attn_mask` is added to the scores; a causal mask is
      `is_causal=True`; a mask row with no key allowed gives NaN in both forms;
    - nothing else may read the weights: SDPA does not return them.

    ## Fix safety
    Only the causal mask is fixed, and **unsafe**: `attn_mask=mask` becomes `is_causal=True`. The same
    positions are masked, but a different kernel runs, so results differ at the dtype's rounding
    (bitwise equal results are not promised between SDPA's kernels). The fix is offered only where the
    mask is square over a `T` read from the size of the tensor that `q` and `k` are both computed from,
    with no concatenation (a KV cache) in between: `is_causal=True` aligns its triangle to the top-left,
    so where the query is shorter than the key (decoding with a cache) it would mask differently from a
    sliced mask. Elsewhere (the whole buffer unsliced, a mask whose size the rule cannot tie to `q` and
    `k`) the finding says why and is not fixed. A mask buffer stays registered (it is a checkpoint key
    unless `persistent=False`); remove it by hand if nothing else reads it.

    ## PyTorch versions
    `F.scaled_dot_product_attention` and `is_causal` exist from PyTorch 2.0 (the rule is silent for an
    older `torch-version`); `scale=` from 2.1; `enable_gqa=` (grouped-query attention) from 2.5. The
    fused kernels run on CUDA (FlashAttention for fp16/bf16 on sm80 and newer; memory-efficient attention
    also for fp32); on the CPU SDPA uses a fused C++ kernel since 2.1. With a non-square mask
    `is_causal=True` uses top-left alignment in every version (`torch.nn.attention.bias.causal_lower_right`
    gives the other, from 2.2).
    """

    code = "TL705"
    name = "attention-not-fused"
    message = "attention written by hand: `F.scaled_dot_product_attention` runs it as one fused kernel"
    summary = "Attention written by hand, or SDPA given a causal mask, instead of the fused kernel"
    silent_in_test_files = True  # the engine leaves test files out (Rule.silent_in_test_files)
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.UNSAFE,)
    text_gate = (("softmax", "Softmax", "scaled_dot_product_attention"),)

    @classmethod
    def may_fire(cls, text: str, settings) -> bool:
        return settings.torch_version >= SDPA_SINCE and (
            "softmax" in text or "Softmax" in text or "scaled_dot_product_attention" in text)

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        if ctx.torch_version < SDPA_SINCE:
            return
        # The file names SDPA (a call, `aten.scaled_dot_product_attention`, an import): its hand-written
        # attention is a fallback, a reference or a pattern for a compiler to replace, by the author's choice.
        knows_sdpa = bool(index.attributes_named("scaled_dot_product_attention")) or any(
            target.endswith(".scaled_dot_product_attention") for target in index.imports.values())
        for product in () if knows_sdpa else _products(index):
            found = _hand_attention(index, product)
            if found is not None:
                ctx.report(product, _hand_message(index, product, found))
        for info in index.calls_to(SDPA):
            self._check_sdpa(ctx, index, info.node)

    def _check_sdpa(self, ctx: IndexContext, index: AstIndex, call: ast.Call) -> None:
        given = call_arguments(call)
        if any(keyword is None and type(value) is ast.Starred for keyword, value in given) or any(
                k.arg is None for k in call.keywords):
            return
        positional = [value for keyword, value in given if keyword is None]
        mask = keyword_value(call, "attn_mask") or (positional[3] if len(positional) > 3 else None)
        causal = keyword_value(call, "is_causal") or (positional[5] if len(positional) > 5 else None)
        if mask is None or is_literal(mask, None) or (causal is not None and not is_literal(causal, False)):
            return  # SDPA rejects a mask with is_causal=True
        if len(positional) < 2:
            return
        found = _causal_mask(index, mask, call)
        if found is None:
            return
        size, sized = found
        message = ("this `attn_mask` is causal: `is_causal=True` masks the same positions from the indices "
                   "and lets SDPA pick its fastest kernel (FlashAttention takes no mask)")
        why = None
        if causal is not None and keyword_value(call, "is_causal") is None:
            why = "`is_causal` is passed by position"
        elif not sized:
            why = "the mask is the whole buffer: is_causal=True is the same only where every sequence is that long"
        elif not _same_length(index, call, positional[0], positional[1], size):
            why = ("the rule cannot tie the mask's size to the length of both q and k; with a KV cache or "
                   "cross-attention is_causal=True aligns to the top-left and masks differently")
        if why is not None:
            ctx.report(call, f"{message} (not fixed automatically: {why})")
            return
        ctx.report(call, message, rewrite=Rewrite(_is_causal, message + " ({reason})", call, reads=call))


# --- hand-written attention -----------------------------------------------------------------------
def _products(index: AstIndex) -> List[ast.AST]:
    """Every matrix product of the file: `a @ b`, `torch.matmul/bmm(a, b)`, `a.matmul(b)`, `einsum(...)`."""
    found: List[ast.AST] = list(index.binary_operations(ast.MatMult))
    found += [info.node for info in index.calls_to(*_MATMUL, _EINSUM)]
    found += [info.node for info in index.calls_by_name.get("matmul", ())
              if type(info.node.func) is ast.Attribute and index.qualified_name(info.node.func) is None]
    found.sort(key=lambda node: (node.lineno, node.col_offset))  # type: ignore[attr-defined]
    return found


def _operands(index: AstIndex, product: ast.AST) -> Optional[Tuple[ast.expr, ast.expr]]:
    if type(product) is ast.BinOp:
        return product.left, product.right  # type: ignore[attr-defined]
    call: ast.Call = product  # type: ignore[assignment]
    if call.keywords or any(type(arg) is ast.Starred for arg in call.args):
        return None
    qualified = index.qualified_name(call.func)
    if qualified in _MATMUL:
        return (call.args[0], call.args[1]) if len(call.args) == 2 else None
    if qualified == _EINSUM:
        return (call.args[1], call.args[2]) if len(call.args) == 3 else None
    if type(call.func) is ast.Attribute and len(call.args) == 1:  # q.matmul(k.mT)
        return call.func.value, call.args[0]
    return None


def _einsum(index: AstIndex, product: ast.AST) -> Optional[Tuple[str, str, str]]:
    """An einsum's two inputs and output, spaces removed, or None for any other product."""
    if type(product) is not ast.Call or index.qualified_name(product.func) != _EINSUM:  # type: ignore[attr-defined]
        return None
    equation = index.literal_string(product.args[0]) if product.args else None  # type: ignore[attr-defined]
    if equation is None or equation.count("->") != 1:
        return ("", "", "")
    inputs, output = equation.replace(" ", "").split("->")
    parts = inputs.split(",")
    return (parts[0], parts[1], output) if len(parts) == 2 else ("", "", "")


def _einsum_is(equation: Tuple[str, str, str], scores: bool) -> bool:
    """The scores, ``...id,...jd->...ij`` (each input's feature letter contracted, in either order:
    ``...di,...dj->...ij`` too), or the weights times the values, ``...ij,...jd->...id`` (the weights'
    last letter, the one the softmax ran over, contracted with the values'), with the same leading
    letters on all three."""
    first, second, output = equation
    if len(first) < 2 or len(second) < 2 or len(output) < 2:
        return False
    lead = first[:-2]
    if second[:-2] != lead or output[:-2] != lead or set(lead) & set(first[-2:] + second[-2:] + output[-2:]):
        return False
    a, b, c = set(first[-2:]), set(second[-2:]), set(output[-2:])
    if len(a) != 2 or len(b) != 2 or len(c) != 2:
        return False
    if scores:
        shared = a & b
        return len(shared) == 1 and (output[-2] in a - shared) and (output[-1] in b - shared) \
            and not shared & c
    query, key = first[-2:]
    return key in b and query not in b and query in c and len(b | c) == 3 and key not in c


def _hand_attention(index: AstIndex, product: ast.AST) -> Optional[_Attention]:
    """``weights @ v`` where the weights are a last-dimension softmax of ``q @ k^T`` (scaled, masked,
    dropped out), in one function that reads them for nothing else and does not call SDPA itself."""
    function = index.function_of(product)
    if function is None or type(function) is ast.Lambda:
        return None
    equation = _einsum(index, product)
    if equation is not None and not _einsum_is(equation, scores=False):
        return None
    operands = _operands(index, product)
    if operands is None:
        return None
    found = _Attention(scores=product, names=set(), bound=set())
    if not _weights(index, operands[0], product, function, found, 0):
        # `torch.bmm(v, w.permute(0, 2, 1))`: the weights transposed on the right, values (B, C, N) on the left
        found = _Attention(scores=product, names=set(), bound=set(), values_first=True)
        weights = _untransposed(index, operands[1], product, function, found) if equation is None else None
        if weights is None or not _weights(index, weights, weights, function, found, 0):
            return None
    if _weights_read_elsewhere(function, found):
        return None
    return found


def _resolve(index: AstIndex, expr: ast.expr, use: ast.AST, function: ast.AST, found: _Attention) -> ast.expr:
    """A name read at ``use`` replaced by the value of its last plain binding before it in ``function``
    (a binding in a block around ``use``); anything else as it is."""
    if type(expr) is not ast.Name:
        return expr
    values = index.values_of(expr.id, function)  # type: ignore[attr-defined]
    before = [v for v in values  # bindings whose value ends before ``use`` (not the one ``use`` is part of)
              if v is None or (v.end_lineno, v.end_col_offset) <= (use.lineno, use.col_offset)]  # type: ignore[attr-defined]
    if not before or before[-1] is None:
        return expr
    value = before[-1]
    statement = index.parent(value)
    block = index.parent(statement) if statement is not None else None
    if type(statement) not in (ast.Assign, ast.AnnAssign) or block is None:
        return expr
    if not (block is function or index.contains(block, use)) and not _updates_itself(index, value, expr.id, function):  # type: ignore[attr-defined]
        return expr
    found.names.add(expr)  # type: ignore[arg-type]
    found.bound.add(expr.id)  # type: ignore[attr-defined]
    return value  # type: ignore[return-value]


def _updates_itself(index: AstIndex, value: ast.AST, name: str, function: ast.AST) -> bool:
    """``if mask is not None: att = att.masked_fill(...)``: a binding under ``if`` that rewrites the name
    from its value before, so that either way the name holds what the chain follows."""
    statement = index.parent(value)
    block = index.parent(statement) if statement is not None else None
    return (type(block) is ast.If and index.function_of(block) is function
            and any(type(n) is ast.Name and n.id == name for n in ast.walk(value)))  # type: ignore[attr-defined]


def _weights(index: AstIndex, expr: ast.expr, use: ast.AST, function: ast.AST, found: _Attention, depth: int) -> bool:
    """``expr`` is the softmax's result, maybe dropped out or cast back."""
    if depth > _MAX_DEPTH:
        return False
    value = _resolve(index, expr, use, function, found)
    if value is not expr:
        return _weights(index, value, value, function, found, depth + 1)
    if type(value) is not ast.Call:
        return False
    call: ast.Call = value  # type: ignore[assignment]
    qualified = index.qualified_name(call.func)
    if qualified in _DROPOUT or _is_module(index, call, _DROPOUT_MODULE):
        found.dropout = True
        inner = _first_argument(call)
        return inner is not None and _weights(index, inner, call, function, found, depth + 1)
    if qualified is None and _is_cast(call):
        return _weights(index, call.func.value, call, function, found, depth + 1)  # type: ignore[attr-defined]
    softmaxed = _softmax_input(index, call)
    if softmaxed is None:
        softmaxed = _softmax_input(index, call, last=2)
        found.three_d = softmaxed is not None
    return softmaxed is not None and _scores(index, softmaxed, call, function, found, depth + 1)


def _is_cast(call: ast.Call) -> bool:
    """A method that keeps the values: ``.float()``, ``.to(torch.float32)``, ``.type(x.dtype)`` (``.type()``
    without an argument answers a string)."""
    if type(call.func) is not ast.Attribute:
        return False
    method = call.func.attr
    return method in _CASTS or (method == "type" and len(call.args) + len(call.keywords) == 1)


def _softmax_input(index: AstIndex, call: ast.Call, last: int = -1) -> Optional[ast.expr]:
    """What a softmax over the last dimension takes: ``F.softmax(x, dim=-1)``, ``x.softmax(-1)``,
    ``self.softmax(x)`` of an ``nn.Softmax(dim=-1)`` attribute; with ``last=2``, a softmax over dim 2 (the last
    of a 3-D tensor)."""
    qualified = index.qualified_name(call.func)
    given = call_arguments(call)
    if qualified in _SOFTMAX:
        positional = [value for keyword, value in given if keyword is None]
        dim = keyword_value(call, "dim") or (positional[1] if len(positional) > 1 else None)
        return positional[0] if positional and _is_last(dim, last) and type(positional[0]) is not ast.Starred \
            else None
    if qualified is None and call_name(call) == "softmax" and type(call.func) is ast.Attribute:
        positional = [value for keyword, value in given if keyword is None]
        dim = keyword_value(call, "dim") or (positional[0] if positional else None)
        return call.func.value if _is_last(dim, last) else None
    if last == -1 and _is_module(index, call, _SOFTMAX_MODULE):
        return _first_argument(call)
    return None


def _is_last(dim: Optional[ast.expr], last: int = -1) -> bool:
    """``dim`` is the integer literal ``last`` (``-1``, or ``2``)."""
    if last >= 0:
        return is_literal(dim, last) and type(dim.value) is int  # type: ignore[union-attr]
    return (type(dim) is ast.UnaryOp and type(dim.op) is ast.USub  # type: ignore[attr-defined]
            and is_literal(dim.operand, -last) and type(dim.operand.value) is int)  # type: ignore[attr-defined]


def _is_module(index: AstIndex, call: ast.Call, module: str) -> bool:
    """``self.<attr>(x)`` where the class assigns ``<attr>`` only ``module(...)`` (a softmax over the last
    dimension for ``nn.Softmax``)."""
    attr = self_attribute(call.func)
    klass = next((a for a in index.ancestors(call) if type(a) is ast.ClassDef), None)
    if attr is None or klass is None:
        return False
    values = class_attributes(index, klass).assigned.get(attr, [])  # type: ignore[arg-type]
    if not values:
        return False
    for value in values:
        if type(value) is not ast.Call or index.qualified_name(value.func) != module:  # type: ignore[attr-defined]
            return False
        if module == _SOFTMAX_MODULE:
            dim = keyword_value(value, "dim") or (value.args[0] if value.args else None)  # type: ignore[arg-type,attr-defined]
            if not _is_last(dim):
                return False
    return True


def _first_argument(call: ast.Call) -> Optional[ast.expr]:
    if call.args and type(call.args[0]) is not ast.Starred:
        return call.args[0]
    return keyword_value(call, "input")


def _scores(index: AstIndex, expr: ast.expr, use: ast.AST, function: ast.AST, found: _Attention, depth: int) -> bool:
    """``expr`` is ``q @ k^T``, maybe scaled, masked, a mask added, cast to float32."""
    if depth > _MAX_DEPTH:
        return False
    value = _resolve(index, expr, use, function, found)
    if value is not expr:
        return _scores(index, value, value, function, found, depth + 1)
    kind = type(value)
    if kind is ast.BinOp:
        op = type(value.op)  # type: ignore[attr-defined]
        if op is ast.MatMult:
            return _is_score_product(index, value, function, found)
        if op in (ast.Mult, ast.Div):
            return _scores(index, value.left, value, function, found, depth + 1) or (  # type: ignore[attr-defined]
                op is ast.Mult and _scores(index, value.right, value, function, found, depth + 1))  # type: ignore[attr-defined]
        if op in (ast.Add, ast.Sub):
            found.added = True
            left = _scores(index, value.left, value, function, found, depth + 1)  # type: ignore[attr-defined]
            if op is not ast.Add:
                return left
            scratch = _Attention(scores=value, names=set(), bound=set())
            right = _scores(index, value.right, value, function, scratch, depth + 1)  # type: ignore[attr-defined]
            if left and right:
                return False  # two score products summed (MLA's absorbed form): no one q and k for SDPA
            if right:
                found.names |= scratch.names
                found.bound |= scratch.bound
                found.masked |= scratch.masked
                found.scores = scratch.scores
            return left or right
        return False
    if kind is not ast.Call:
        return False
    call: ast.Call = value  # type: ignore[assignment]
    qualified = index.qualified_name(call.func)
    if qualified in _MATMUL or qualified == _EINSUM:
        return _is_score_product(index, call, function, found)
    if qualified is None and type(call.func) is ast.Attribute:
        method = call.func.attr
        if method == "matmul":
            return _is_score_product(index, call, function, found)
        if method in ("masked_fill", "masked_fill_") and len(call.args) == 2:
            found.masked = True
            return _scores(index, call.func.value, call, function, found, depth + 1)
        if _is_cast(call) or method in ("mul", "div"):
            return _scores(index, call.func.value, call, function, found, depth + 1)
    return False


def _is_score_product(index: AstIndex, product: ast.AST, function: ast.AST, found: _Attention) -> bool:
    equation = _einsum(index, product)
    if equation is not None:
        if not _einsum_is(equation, scores=True):
            return False
        found.scores = product
        return True
    if found.three_d and not (type(product) is ast.Call and index.qualified_name(product.func) == "torch.bmm"):  # type: ignore[attr-defined]
        return False  # a softmax over dim 2 of a product that may have more dimensions
    operands = _operands(index, product)
    if operands is None:
        return False
    # `q @ k^T`, or `q.permute(0, 2, 1) @ k` with q and k laid out (B, C, N): the same `q^T k`
    scratch = _Attention(scores=product, names=set(), bound=set())
    if _untransposed(index, operands[1], product, function, scratch) is None \
            and _untransposed(index, operands[0], product, function, scratch) is None:
        return False
    found.scores = product
    return True


def _untransposed(index: AstIndex, expr: ast.expr, use: ast.AST, function: ast.AST, found: _Attention
                  ) -> Optional[ast.expr]:
    """The tensor ``expr`` transposes the last two dimensions of (``k`` of ``k.transpose(-2, -1)``, ``k.mT``,
    ``k.permute(..., b, a)``, ``k.t()``), also through a name bound to one (noted in ``found``); None for
    anything else."""
    value = _resolve(index, expr, use, function, found)
    if type(value) is ast.Attribute:
        transposed = value.attr in ("mT", "T") and index.qualified_name(value) is None  # type: ignore[attr-defined]
        return value.value if transposed else None  # type: ignore[attr-defined]
    if type(value) is not ast.Call or type(value.func) is not ast.Attribute:  # type: ignore[attr-defined]
        return None
    call: ast.Call = value  # type: ignore[assignment]
    method = call.func.attr  # type: ignore[attr-defined]
    qualified = index.qualified_name(call.func)
    numbers = [_int(arg) for arg in call.args]
    inner = call.func.value  # type: ignore[attr-defined]
    if qualified == "torch.transpose":
        numbers, inner = numbers[1:], (call.args[0] if call.args else None)
    elif qualified is not None:
        return None
    if method == "transpose" and len(numbers) == 2 and None not in numbers:
        transposed = set(numbers) in ({-2, -1}, {2, 3}, {1, 2})
    elif method == "permute" and len(numbers) >= 3 and None not in numbers:
        transposed = numbers[-2:] == [len(numbers) - 1, len(numbers) - 2] or numbers[-2:] == [-1, -2]
    else:
        transposed = method == "t" and not call.args
    return inner if transposed and type(inner) is not ast.Starred else None


def _int(node: ast.expr) -> Optional[int]:
    if type(node) is ast.Constant and type(node.value) is int:  # type: ignore[attr-defined]
        return node.value  # type: ignore[attr-defined]
    if type(node) is ast.UnaryOp and type(node.op) is ast.USub:  # type: ignore[attr-defined]
        inner = _int(node.operand)  # type: ignore[attr-defined]
        return -inner if inner is not None else None
    return None


def _weights_read_elsewhere(function: ast.AST, found: _Attention) -> bool:
    """A name the chain went through read anywhere else in the function (returned, stored, logged...);
    ``att.masked_fill_(...)`` as a statement of its own is part of the chain, and reading its metadata
    (``w.dtype``, ``w.shape``, ``w.size(-1)``) reads no values SDPA would not give."""
    for node in ast.walk(function):
        if type(node) is ast.Expr and type(node.value) is ast.Call:  # type: ignore[attr-defined]
            func = node.value.func  # type: ignore[attr-defined]
            if type(func) is ast.Attribute and func.attr == "masked_fill_" and type(func.value) is ast.Name \
                    and func.value.id in found.bound:
                found.names.add(func.value)
                found.masked = True
    metadata = {id(read) for read in map(_metadata_of, ast.walk(function)) if read is not None}
    return any(type(node) is ast.Name and node.id in found.bound and type(node.ctx) is ast.Load  # type: ignore[attr-defined]
               and node not in found.names and id(node) not in metadata for node in ast.walk(function))


def _metadata_of(node: ast.AST) -> Optional[ast.expr]:
    """The tensor whose metadata ``node`` reads (``x.dtype``, ``x.shape``, ``x.size(-1)``), or None."""
    if type(node) is ast.Attribute and node.attr in _METADATA:  # type: ignore[attr-defined]
        return node.value  # type: ignore[attr-defined]
    if type(node) is ast.Call and type(node.func) is ast.Attribute and node.func.attr in _METADATA_METHODS:  # type: ignore[attr-defined]
        return node.func.value  # type: ignore[attr-defined]
    return None


def _hand_message(index: AstIndex, product: ast.AST, found: _Attention) -> str:
    checks = ["its default scale is 1/sqrt(E) of the query's last dimension (pass `scale=` for another, "
              "torch >= 2.1)"]
    if found.dropout:
        checks.append("`dropout_p` applies in eval too: pass `p if self.training else 0.0`")
    if found.masked:
        checks.append("a boolean `attn_mask` is True where attention takes part, the inverse of "
                      "`masked_fill`'s mask (a causal mask is `is_causal=True`)")
    if found.added:
        checks.append("a float `attn_mask` is added to the scores")
    if found.values_first:
        checks.append("SDPA takes queries, keys and values laid out (..., N, C) and returns its output so: "
                      "transpose those given (..., C, N) here, and its output back")
    statement = next(a for a in index.ancestors(found.scores) if isinstance(a, ast.stmt))
    scores = index.code_for_node(found.scores, statement)
    scores = f"`{scores}`" if len(scores) <= 60 and "\n" not in scores else "a `q @ k^T` product"
    return (f"attention written by hand (softmax of {scores}, applied to the values): "
            "`F.scaled_dot_product_attention` computes it in one fused kernel without storing the weights; "
            "check before switching: " + "; ".join(checks))


# --- SDPA given a causal mask ---------------------------------------------------------------------
def _causal_mask(index: AstIndex, mask: ast.expr, call: ast.Call) -> Optional[Tuple[Optional[str], bool]]:
    """For a certainly causal boolean or -inf mask: (the text of the size its slice or its build gives,
    whether it is sliced or built to that size); None otherwise."""
    function = index.function_of(call)
    scratch = _Attention(scores=call, names=set(), bound=set())
    value = _resolve(index, mask, call, function, scratch) if function is not None else mask
    compared = _compared_to_true(value)
    if compared is not None:  # `self.bias[:, :, :T, :T] == 1`: the float buffer read as a boolean one
        value = compared
    sliced: Optional[str] = None
    if type(value) is ast.Subscript:
        sliced = _square_slice(index, value, call)
        if sliced is None:
            return None
        value = value.value  # type: ignore[attr-defined]
    attr = self_attribute(value)
    if attr is not None:
        value = _buffer_value(index, call, attr)
        if value is None:
            return None
        causal = _causal(index, value, call, compared is not None)
        if sliced is None:
            return (None, False) if causal is not None else None
        return (sliced, True) if causal is not None else None
    if compared is not None and sliced is None:
        return None  # `other.mask == 1`: not a buffer of this class, nor a mask built here
    size = _causal(index, value, call, compared is not None)
    if size is None:
        return None
    if sliced is not None:
        return sliced, True
    return size, True


def _compared_to_true(value: ast.expr) -> Optional[ast.expr]:
    """``buffer[...] == 1``, ``!= 0``, ``> 0`` (or of ``self.buffer`` itself): the compared tensor; None for
    anything else (``== 0`` is True above the diagonal: the inverse of a causal mask)."""
    if type(value) is not ast.Compare or len(value.ops) != 1 or type(value.ops[0]) not in _BOOL_COMPARE:  # type: ignore[attr-defined]
        return None
    left = value.left  # type: ignore[attr-defined]
    if type(left) not in (ast.Subscript, ast.Attribute):
        return None
    expected = 0 if type(value.ops[0]) in (ast.NotEq, ast.Gt) else 1  # type: ignore[attr-defined]
    return left if is_literal(value.comparators[0], expected) else None  # type: ignore[attr-defined]


def _square_slice(index: AstIndex, subscript: ast.Subscript, call: ast.Call) -> Optional[str]:
    """``[:, :, :T, :T]``, ``[..., :T, :T]`` or ``[:T, :T]``: the text of ``T``."""
    parts = subscript.slice.elts if type(subscript.slice) is ast.Tuple else [subscript.slice]  # type: ignore[attr-defined]
    if len(parts) < 2:
        return None
    statement = next(a for a in index.ancestors(call) if isinstance(a, ast.stmt))
    bounds = []
    for part in parts[-2:]:
        if type(part) is not ast.Slice or part.lower is not None or part.step is not None or part.upper is None:  # type: ignore[attr-defined]
            return None
        bounds.append(ast.dump(part.upper))  # type: ignore[attr-defined]
    for part in parts[:-2]:
        if not (type(part) is ast.Slice and part.lower is None and part.upper is None and part.step is None) \
                and not is_literal(part, Ellipsis):  # type: ignore[attr-defined]
            return None
    if bounds[0] != bounds[1]:
        return None
    return index.code_for_node(parts[-1].upper, statement)  # type: ignore[attr-defined]


def _buffer_value(index: AstIndex, call: ast.Call, attr: str) -> Optional[ast.expr]:
    """The one value ``self.register_buffer("<attr>", value)`` or ``self.<attr> = value`` gives in the class."""
    klass = next((a for a in index.ancestors(call) if type(a) is ast.ClassDef), None)
    if klass is None:
        return None
    facts = class_attributes(index, klass)  # type: ignore[arg-type]
    values = list(facts.assigned.get(attr, []))
    for registered in facts.calls.get("register_buffer", []):
        if registered.args and index.literal_string(registered.args[0]) == attr:
            if len(registered.args) < 2 or type(registered.args[1]) is ast.Starred:
                return None
            values.append(registered.args[1])
    return values[0] if len(values) == 1 else None


def _causal(index: AstIndex, value: ast.expr, call: ast.Call, compared: bool = False) -> Optional[str]:
    """The size text ``T`` of a causal ``(T, T)`` mask SDPA reads as one: boolean and True on and below the
    diagonal, or float and -inf above it (through ``.view(1, 1, T, T)``); None for anything else. With
    ``compared`` the caller read ``value == 1``: a tril of ones of any dtype is then causal."""
    statement = next(a for a in index.ancestors(call) if isinstance(a, ast.stmt))
    for _ in range(_MAX_DEPTH):  # `mask = torch.tril(...)` then `register_buffer("mask", mask.view(...))`
        inner = value
        while type(inner) is ast.Call and type(inner.func) is ast.Attribute and inner.func.attr in ("view", "reshape"):  # type: ignore[attr-defined]
            inner = inner.func.value  # type: ignore[attr-defined]
        if type(inner) is not ast.Name:
            break
        bound = index.single_value(inner.id, index.scope_of(inner))  # type: ignore[attr-defined]
        if not isinstance(bound, ast.expr):
            return None
        value = bound if inner is value else _replace_root(value, bound)
    while (type(value) is ast.Call and type(value.func) is ast.Attribute  # type: ignore[attr-defined]
           and value.func.attr in ("view", "reshape", "to", "unsqueeze")  # type: ignore[attr-defined]
           and index.qualified_name(value.func) is None):  # type: ignore[attr-defined]
        if value.func.attr == "to" and not compared:  # compared to 1, the dtype `.to()` gives does not matter
            if not any(index.qualified_name(a) == "torch.bool" for a in value.args):  # type: ignore[attr-defined]
                return _causal_float(index, value, statement)
            return _tril_of_ones(index, value.func.value, statement, boolean=False)  # type: ignore[attr-defined]
        value = value.func.value  # type: ignore[attr-defined]
    if type(value) is ast.Compare and len(value.ops) == 1 and type(value.ops[0]) in _BOOL_COMPARE:  # type: ignore[attr-defined]
        expected = 0 if type(value.ops[0]) in (ast.NotEq, ast.Gt) else 1  # type: ignore[attr-defined]
        if is_literal(value.comparators[0], expected):  # type: ignore[attr-defined]
            return _tril_of_ones(index, value.left, statement, boolean=False)  # type: ignore[attr-defined]
        return None
    if type(value) is ast.Call and call_name(value) == "bool" and not value.args \
            and type(value.func) is ast.Attribute:  # type: ignore[attr-defined]
        return _tril_of_ones(index, value.func.value, statement, boolean=False)  # type: ignore[attr-defined]
    if compared:
        return _tril_of_ones(index, value, statement, boolean=False)
    return _tril_of_ones(index, value, statement, boolean=True) or _causal_float(index, value, statement)


def _replace_root(chain: ast.expr, root: ast.expr) -> ast.expr:
    """``mask.view(1, 1, n, n)`` read with ``mask``'s value in its place (a new node, for reading only)."""
    if type(chain) is ast.Call and type(chain.func) is ast.Attribute:  # type: ignore[attr-defined]
        func = ast.Attribute(value=_replace_root(chain.func.value, root), attr=chain.func.attr, ctx=ast.Load())  # type: ignore[attr-defined]
        return ast.Call(func=func, args=chain.args, keywords=chain.keywords)  # type: ignore[attr-defined]
    return root


def _tril_of_ones(index: AstIndex, value: ast.expr, statement: ast.stmt, boolean: bool) -> Optional[str]:
    """``torch.tril(torch.ones(T, T, ...))`` / ``torch.ones(T, T).tril()`` with the main diagonal; with
    ``boolean`` only a ``dtype=torch.bool`` one."""
    if type(value) is not ast.Call:
        return None
    if index.qualified_name(value.func) == "torch.tril" and value.args:  # type: ignore[attr-defined]
        ones, rest = value.args[0], value.args[1:] + [k.value for k in value.keywords]  # type: ignore[attr-defined]
    elif call_name(value) == "tril" and type(value.func) is ast.Attribute:  # type: ignore[attr-defined]
        ones, rest = value.func.value, value.args + [k.value for k in value.keywords]  # type: ignore[attr-defined]
    else:
        return None
    if any(not is_literal(r, 0) for r in rest):
        return None  # another diagonal
    if type(ones) is not ast.Call or index.qualified_name(ones.func) != "torch.ones":
        return None
    dtype = keyword_value(ones, "dtype")
    if boolean and (dtype is None or index.qualified_name(dtype) != "torch.bool"):
        return None
    return _square_size(index, ones, statement)


def _causal_float(index: AstIndex, value: ast.expr, statement: ast.stmt) -> Optional[str]:
    """``torch.triu(torch.full((T, T), float("-inf")), diagonal=1)`` or
    ``nn.Transformer.generate_square_subsequent_mask(T)``."""
    if type(value) is not ast.Call:
        return None
    qualified = index.qualified_name(value.func)
    if qualified == "torch.nn.Transformer.generate_square_subsequent_mask" and len(value.args) == 1:
        return index.code_for_node(value.args[0], statement)
    if qualified != "torch.triu" or len(value.args) != 1:
        return None
    diagonal = keyword_value(value, "diagonal")
    full = value.args[0]
    if not is_literal(diagonal, 1) or type(full) is not ast.Call or index.qualified_name(full.func) != "torch.full":
        return None
    if len(full.args) < 2 or not _is_minus_inf(index, full.args[1]):
        return None
    shape = full.args[0]
    if type(shape) not in (ast.Tuple, ast.List) or len(shape.elts) != 2:  # type: ignore[attr-defined]
        return None
    first, second = shape.elts  # type: ignore[attr-defined]
    if ast.dump(first) != ast.dump(second):
        return None
    return index.code_for_node(first, statement)


def _is_minus_inf(index: AstIndex, node: ast.expr) -> bool:
    """``float("-inf")``."""
    return (type(node) is ast.Call and type(node.func) is ast.Name and node.func.id == "float"  # type: ignore[attr-defined]
            and len(node.args) == 1 and index.literal_string(node.args[0]) == "-inf")  # type: ignore[attr-defined]


def _square_size(index: AstIndex, ones: ast.Call, statement: ast.stmt) -> Optional[str]:
    sizes = ones.args
    if len(sizes) == 1 and type(sizes[0]) in (ast.Tuple, ast.List):
        sizes = sizes[0].elts  # type: ignore[attr-defined]
    if len(sizes) != 2 or ast.dump(sizes[0]) != ast.dump(sizes[1]):
        return None
    return index.code_for_node(sizes[0], statement)


_FOLLOWED = {"view", "reshape", "transpose", "permute", "contiguous", "split", "chunk", "unflatten", "float",
             "half", "bfloat16", "to", "type_as", "unbind", "squeeze", "unsqueeze", "flatten"}


def _same_length(index: AstIndex, call: ast.Call, query: ast.expr, key: ast.expr, size: Optional[str]) -> bool:
    """``q`` and ``k`` are both computed from one parameter ``x`` of the function (through projections,
    views, transposes, splits: no concatenation), and the mask's size ``T`` is read from ``x``'s size."""
    function = index.function_of(call)
    if function is None or type(function) is ast.Lambda or size is None:
        return False
    assignments = [n for n in ast.walk(function) if type(n) is ast.Assign]
    roots = {_root(index, query, function, assignments, 0), _root(index, key, function, assignments, 0)}
    if len(roots) != 1 or None in roots:
        return False
    root = roots.pop()
    return _size_of(size, root, assignments)


def _binding(name: str, use: ast.AST, assignments: List[ast.Assign]) -> Optional[Tuple[ast.Assign, Optional[int]]]:
    """The last assignment before ``use`` that binds ``name``, with its place in a tuple target."""
    found = None
    for assign in assignments:
        if (assign.end_lineno, assign.end_col_offset) > (use.lineno, use.col_offset):  # type: ignore[attr-defined]
            continue  # after ``use``, or the assignment ``use`` is part of
        for target in assign.targets:
            if type(target) is ast.Name and target.id == name:
                found = (assign, None)
            elif type(target) is ast.Tuple and all(type(e) is ast.Name for e in target.elts):
                for place, element in enumerate(target.elts):
                    if element.id == name:  # type: ignore[attr-defined]
                        found = (assign, place)
    return found


def _root(index: AstIndex, expr: ast.expr, function: ast.AST, assignments: List[ast.Assign], depth: int) -> Optional[str]:
    """The parameter of ``function`` an expression is computed from by projections and reshapes alone."""
    if depth > _MAX_DEPTH:
        return None
    kind = type(expr)
    if kind is ast.Name:
        found = _binding(expr.id, expr, assignments)  # type: ignore[attr-defined]
        if found is None:
            parameters = {a.arg for a in function.args.args + function.args.kwonlyargs}  # type: ignore[attr-defined]
            return expr.id if expr.id in parameters and expr.id != "self" else None  # type: ignore[attr-defined]
        assign, place = found
        value = assign.value
        if place is not None and type(value) is ast.Tuple:  # q, k, v = split(q), split(k), split(v)
            if len(value.elts) != len(assign.targets[0].elts):  # type: ignore[attr-defined]
                return None
            value = value.elts[place]
        return _root(index, value, function, assignments, depth + 1)
    if kind is ast.Subscript and _int(expr.slice) is not None:  # qkv[0]: a part, as long as the whole
        return _root(index, expr.value, function, assignments, depth + 1)  # type: ignore[attr-defined]
    if kind is not ast.Call:
        return None
    call: ast.Call = expr  # type: ignore[assignment]
    if type(call.func) is ast.Attribute and call.func.attr in _FOLLOWED and index.qualified_name(call.func) is None:
        return _root(index, call.func.value, function, assignments, depth + 1)
    if self_attribute(call.func) is not None and len(call.args) == 1 and not call.keywords:
        return _root(index, call.args[0], function, assignments, depth + 1)  # a projection: self.c_attn(x)
    return None


def _size_of(size: str, root: str, assignments: List[ast.Assign]) -> bool:
    """``B, T, C = x.size()`` / ``x.shape``, or ``T = x.size(1)`` / ``x.shape[1]``: ``T`` read from ``x``."""
    for assign in assignments:
        for target in assign.targets:
            value = assign.value
            if type(target) is ast.Tuple and any(type(e) is ast.Name and e.id == size for e in target.elts):
                if _reads_size(value, root, whole=True):
                    return True
            elif type(target) is ast.Name and target.id == size and _reads_size(value, root, whole=False):
                return True
    return False


def _reads_size(value: ast.expr, root: str, whole: bool) -> bool:
    if type(value) is ast.Subscript and not whole:  # x.shape[1]
        value = value.value  # type: ignore[attr-defined]
    if type(value) is ast.Attribute and value.attr == "shape":  # type: ignore[attr-defined]
        return type(value.value) is ast.Name and value.value.id == root  # type: ignore[attr-defined]
    if type(value) is ast.Call and type(value.func) is ast.Attribute and value.func.attr == "size":  # type: ignore[attr-defined]
        receiver = value.func.value  # type: ignore[attr-defined]
        return type(receiver) is ast.Name and receiver.id == root and (not value.args) == whole  # type: ignore[attr-defined]
    return False


def _is_causal(call: cst.Call, analysis: "FileAnalysis") -> Union[Fix, str]:
    """``attn_mask=mask`` becomes ``is_causal=True`` in its place; a positional mask becomes ``None`` when
    positional arguments follow it, else the keyword."""
    args = list(call.args)
    positional = [i for i, arg in enumerate(args) if arg.keyword is None and not arg.star]
    at = next((i for i, arg in enumerate(args) if arg.keyword is not None and arg.keyword.value == "attn_mask"), None)
    causal = cst.Arg(value=cst.Name("True"), keyword=cst.Name("is_causal"),
                     equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                           whitespace_after=cst.SimpleWhitespace("")))
    given = next((i for i, arg in enumerate(args) if arg.keyword is not None and arg.keyword.value == "is_causal"), None)
    if given is not None:  # `is_causal=False` becomes True, and the mask goes
        args[given] = args[given].with_changes(value=cst.Name("True"))
        if at is None:
            args[positional[3]] = args[positional[3]].with_changes(value=cst.Name("None"))
        else:
            if at == len(args) - 1:
                args[at - 1] = args[at - 1].with_changes(comma=args[at].comma)
            del args[at]
        return _fix(call, call.with_changes(args=args))
    if at is None:
        at = positional[3]
        if len(positional) > 4:  # dropout_p follows by position
            args[at] = args[at].with_changes(value=cst.Name("None"))
            last = args[-1]
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(causal.with_changes(comma=last.comma))
            return _fix(call, call.with_changes(args=args))
    args[at] = causal.with_changes(comma=args[at].comma)
    return _fix(call, call.with_changes(args=args))


def _fix(call: cst.Call, new: cst.Call) -> Union[Fix, str]:
    if loses_comment({call: new}):
        return DROPS_COMMENT
    return Fix.replace(call, new, Applicability.UNSAFE)
