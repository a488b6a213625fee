"""TL104: ``torch.tensor(ndarray)`` copies the array where ``torch.from_numpy`` would share it."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, List, Optional, Set, Union

import libcst as cst

from torchlint.facts.index import AstIndex, AstScope, call_arguments, call_name, is_literal, keyword_value
from torchlint.fix.comments import DROPS_COMMENT, loses_comment
from torchlint.facts.arrays import numpy_source
from torchlint.rule import Applicability, Fix, FixAvailability, ImportRequest, IndexContext, Rewrite, Rule

if TYPE_CHECKING:
    from torchlint.fix.analysis import FileAnalysis
from torchlint.facts.text_gates import call_text, search_word

_TENSOR_CALL_TEXT = call_text("tensor")  # `tensor (x)`, `(torch.tensor)(x)`, a comment before `(`

# numpy functions whose result is a new, writable, positively strided array nobody else holds
# (unless ``out=`` says otherwise).
_FRESH_FUNCS = {
    "array", "copy", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
    "arange", "linspace", "logspace", "geomspace", "eye", "identity", "load", "loadtxt", "genfromtxt",
    "fromfile", "fromiter", "fromstring", "stack", "concatenate", "vstack", "hstack", "dstack",
    "column_stack", "tile", "repeat", "pad", "sort", "argsort", "unique", "cumsum", "outer", "clip", "where",
    "random.permutation", "random.randint", "random.choice", "random.rand", "random.randn", "random.random",
    "random.uniform", "random.normal", "random.standard_normal", "random.random_sample",
}
# numpy functions that may return (a view of) their argument: the result can share memory with an array
# the program still holds.
_MAY_ALIAS_FUNCS = {"asarray", "ascontiguousarray", "asfortranarray", "transpose", "reshape", "expand_dims",
                    "squeeze", "diff"}
# May return negative strides, which torch.from_numpy rejects: the copy is needed, nothing to gain.
_NEGATIVE_STRIDE_FUNCS = {"flip", "fliplr", "flipud", "rot90"}
# May return a read-only array (frombuffer over bytes, diag of a 2-D array): from_numpy warns and shares it.
_READ_ONLY_FUNCS = {"frombuffer", "diag"}
# ndarray methods: those that always copy, and those that may return a view.
_COPYING_METHODS = {"copy", "astype", "flatten"}
_VIEW_METHODS = {"reshape", "transpose", "squeeze", "view", "ravel"}

# dtype names, numpy and torch, normalised to numpy's spelling.
_NUMPY_DTYPES = {
    "float64": "float64", "double": "float64", "float_": "float64", "float32": "float32", "single": "float32",
    "float16": "float16", "half": "float16", "int64": "int64", "int32": "int32", "int16": "int16",
    "int8": "int8", "uint8": "uint8", "bool_": "bool", "bool": "bool", "complex64": "complex64",
    "complex128": "complex128",
}
_TORCH_DTYPES = {
    "float64": "float64", "double": "float64", "float32": "float32", "float": "float32", "float16": "float16",
    "half": "float16", "int64": "int64", "long": "int64", "int32": "int32", "int": "int32", "int16": "int16",
    "short": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool", "complex64": "complex64",
    "cfloat": "complex64", "complex128": "complex128", "cdouble": "complex128",
}
# numpy creators that make float64 unless told otherwise (rand & co. have no dtype parameter at all).
_FLOAT64_BY_DEFAULT = {"zeros", "ones", "empty", "eye", "identity", "random.rand", "random.randn",
                       "random.random", "random.random_sample", "random.uniform", "random.normal",
                       "random.standard_normal"}


@dataclass
class _Array:
    """What is known about the array an expression evaluates to."""

    fresh: bool = True  # a temporary nobody else holds
    read_only: bool = False  # may be non-writable
    negative_strides: bool = False  # may have negative strides
    file_backed: bool = False  # np.load(..., mmap_mode=...)
    dtype: Optional[str] = None  # numpy dtype when statically known


class TensorFromNumpyCopies(Rule):
    """## What it does
    Flags `torch.tensor(a)` where `a` is certainly a NumPy array: the result of a NumPy function that
    makes arrays (`np.zeros(...)`, `np.load(...)`, `np.stack(...)`), of `.numpy()`, or a name bound only
    to such values in the same scope.

    ## Why is this slow?
    `torch.tensor()` always copies its data. For an array that is already in memory, `torch.from_numpy()`
    wraps the same buffer in a tensor without copying (and `torch.as_tensor(a, dtype=...)` copies only when
    the dtype has to change). In a `Dataset.__getitem__` or a preprocessing loop the copy is paid for every
    sample: on a 4000x4000 float32 array it costs about 50 ms, against microseconds for `from_numpy`.

    Not flagged, because there is nothing to gain:
    - `torch.Tensor(a)`, `torch.FloatTensor(a)` and the other legacy constructors: they already share the
      array when its dtype matches theirs, and otherwise convert, which `as_tensor` would do too. Moved on
      to a device (`torch.FloatTensor(a).to(device)`, `torch.from_numpy(a).to(device)`), they cost what
      `torch.as_tensor(a, dtype=..., device=...)` costs (TL102 says why).
    - `device=` anything but the CPU: the host-to-device copy happens either way.
    - `pin_memory=True`: the copy into pinned memory is the point.
    - an explicit `dtype=` unless the array's dtype is known to be the same (`np.zeros(n)` is float64,
      `np.array(observations)` of gym's float64 observations unknown): a conversion copies either way,
      so `as_tensor` saves something only where the code shows the dtypes match.
    - arrays that may have negative strides (`np.flip`, `np.rot90`): `from_numpy` rejects them, the copy
      is needed.
    - lists, Python scalars, NumPy scalars (`a.sum()`, `np.float32(1)`) and tensors.

    ## Example
    ```python
    import numpy as np
    import torch

    class Frames(torch.utils.data.Dataset):
        def __getitem__(self, i):
            frame = torch.tensor(np.load(self.paths[i]))
            masks = torch.tensor(np.stack(self.masks[i], dtype=np.float32), dtype=torch.float32)
            return frame, masks
    ```

    ## Use instead
    ```python
    import numpy as np
    import torch

    class Frames(torch.utils.data.Dataset):
        def __getitem__(self, i):
            frame = torch.from_numpy(np.load(self.paths[i]))
            masks = torch.as_tensor(np.stack(self.masks[i], dtype=np.float32), dtype=torch.float32)
            return frame, masks
    ```

    ## Fix safety
    `torch.tensor(a)` becomes `torch.from_numpy(a)`; with `dtype=` (or `device="cpu"`) it becomes
    `torch.as_tensor(a, dtype=...)`. Defaults such as `requires_grad=False` are dropped.

    The fix is **safe** when `a` is a fresh temporary that nothing else holds: a call such as `np.load(...)`,
    `np.stack(...)`, `np.array(...)` or `x.astype(...)`. The tensor then owns the buffer alone, as before.

    It is **unsafe** when `a` is a name, `.numpy()` of a tensor, or a NumPy call that may return a view of
    another array (`np.asarray`, `np.reshape`, `.reshape()`, `.ravel()`...): the new tensor shares memory
    with that array (or tensor), so an in-place write to one shows in the other, where `torch.tensor` gave
    an independent copy.

    There is no fix (report only) when:
    - `requires_grad=` is given (`as_tensor` has no such argument; `torch.from_numpy(a).requires_grad_()`
      shares memory);
    - the array may be read-only (`np.frombuffer`, `np.diag`) or file-backed (`np.load(..., mmap_mode=...)`):
      `from_numpy` would share a buffer that cannot (or should not) be written, where `torch.tensor` made a
      private writable copy;
    - a comment sits on an argument the fix drops (`requires_grad=False  # note`): it would drop the comment.
      Comments elsewhere in the call stay where they are.

    ## PyTorch versions
    `torch.from_numpy` and `torch.as_tensor` exist in every supported version (1.x and 2.x). NumPy uint16,
    uint32 and uint64 arrays convert with both `torch.tensor` and `torch.from_numpy` from PyTorch 2.3 on.
    """

    code = "TL104"
    name = "tensor-from-numpy-copies"
    message = "`torch.tensor()` copies the NumPy array; use `torch.from_numpy()` to share its memory"
    summary = "torch.tensor() on a NumPy array copies it; torch.from_numpy() does not"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicabilities = (Applicability.SAFE, Applicability.UNSAFE)
    text_gate = (("numpy",), ("tensor",))

    @classmethod
    def may_fire(cls, text: str, settings) -> bool:
        """``numpy`` and a ``tensor(`` call in the text (its word boundary tested by hand: see text_prefilter)."""
        return "numpy" in text and search_word(_TENSOR_CALL_TEXT, text) is not None

    def detect(self, ctx: IndexContext) -> None:
        index = ctx.index
        for info in index.calls_to("torch.tensor"):  # `from torch import tensor as T` too
            self._check_call(ctx, index, info.node)

    def _check_call(self, ctx: IndexContext, index: AstIndex, call: ast.Call) -> None:
        if (len(call.args) != 1 or isinstance(call.args[0], ast.Starred)
                or any(keyword.arg is None for keyword in call.keywords)):
            return
        data = call.args[0]
        array = _describe(index, data, index.scope_of(call), 0)
        if array is None or array.negative_strides:
            return
        dtype: Optional[ast.expr] = None
        kept = 1  # the data, and the `device=` / `dtype=` arguments
        requires_grad = False
        for keyword in call.keywords:
            if keyword.arg == "device":
                if not _is_cpu(index, keyword.value):
                    return  # the host-to-device copy happens either way
                kept += 1
            elif keyword.arg == "dtype":
                dtype = keyword.value
                kept += 1
            elif keyword.arg == "pin_memory":
                if not is_literal(keyword.value, False):
                    return  # copying into pinned memory is the point
            elif keyword.arg == "requires_grad":
                if not is_literal(keyword.value, False):
                    requires_grad = True
            else:
                return  # an argument we do not know: leave it alone
        if dtype is not None and (array.dtype is None or _torch_dtype(index, dtype) != array.dtype):
            return  # a conversion copies anyway, and `as_tensor` saves nothing unless the dtypes are known equal
        what = _show(index, data, call)
        if requires_grad:
            ctx.report(call, message=(
                f"`torch.tensor()` copies the NumPy array {what}; `torch.from_numpy(...).requires_grad_()` "
                "avoids the copy if sharing the array's memory is fine"))
            return
        if array.file_backed:
            ctx.report(call, message=(
                f"`torch.tensor()` copies the memory-mapped array {what}; `torch.from_numpy()` would avoid the "
                "copy but keep the tensor backed by the file (read-only with mmap_mode='r')"))
            return
        if array.read_only:
            ctx.report(call, message=(
                f"`torch.tensor()` copies {what}, which may be read-only; `torch.from_numpy()` avoids the copy "
                "only if the tensor is never written to"))
            return
        applicability = Applicability.SAFE if array.fresh else Applicability.UNSAFE
        if kept > 1:
            message = f"`torch.tensor()` copies the NumPy array {what}; use `torch.as_tensor()`, which copies only to convert"
        else:
            message = f"`torch.tensor()` copies the NumPy array {what}; use `torch.from_numpy()`"
        if isinstance(data, ast.Name):
            message += " (the tensor then shares the array's memory)" if kept == 1 else \
                " (the tensor may then share the array's memory)"
        elif not array.fresh:
            message += " (the tensor may then share memory with another array or tensor)"
        rewrite = Rewrite(partial(_from_numpy, applicability=applicability), message + " ({reason})", call, reads=call)
        ctx.report(call, message=message, rewrite=rewrite)


def _from_numpy(call: cst.Call, a: FileAnalysis, applicability: Applicability) -> Union[Fix, str]:
    """``torch.from_numpy(x)``, or ``torch.as_tensor(x, dtype=..., device=...)`` where those are kept; the
    ``pin_memory=False`` and ``requires_grad=False`` arguments go."""
    keep = [arg for arg in call.args if arg.keyword is None or arg.keyword.value in ("device", "dtype")]
    fix_call, imports = _rewrite(a, call, keep, use_as_tensor=len(keep) > 1)
    if loses_comment({call: fix_call}):  # one beside a dropped `requires_grad=False`
        return DROPS_COMMENT
    return Fix.replace(call, fix_call, applicability, imports)


def _show(index: AstIndex, expr: ast.expr, call: ast.Call) -> str:
    """The argument as written, where it is short (LibCST's ``code_for_node``: with its parentheses)."""
    statement = next(a for a in index.ancestors(call) if isinstance(a, ast.stmt))
    code = index.code_for_node(expr, statement)
    if "\n" in code or len(code) > 40:
        code = index.code_for_node(expr.func, statement) + "(...)" if isinstance(expr, ast.Call) else "..."
        if "\n" in code or len(code) > 40:
            return "argument"
    return f"`{code}`"


def _rewrite(a: FileAnalysis, call: cst.Call, keep: List[cst.Arg], use_as_tensor: bool):
    new_name = "as_tensor" if use_as_tensor else "from_numpy"
    imports: tuple = ()
    if isinstance(call.func, cst.Attribute):
        func: cst.BaseExpression = call.func.with_changes(attr=cst.Name(new_name))
    else:  # `from torch import tensor`
        alias = a.module_alias("torch")
        if alias is None:
            alias = "torch"
            imports = (ImportRequest("torch"),)
        func = cst.Attribute(value=cst.Name(alias), attr=cst.Name(new_name))
    args = list(keep)
    if len(args) < len(call.args):
        # the last argument may have been dropped: carry its trailing comma (or its absence) over
        last_comma = call.args[-1].comma
        args[-1] = args[-1].with_changes(comma=last_comma)
    return call.with_changes(func=func, args=args), imports


def _is_cpu(index: AstIndex, expr: ast.expr) -> bool:
    if isinstance(expr, ast.Constant):
        return index.literal_string(expr) == "cpu"
    if (isinstance(expr, ast.Call) and index.qualified_name(expr.func) == "torch.device"
            and len(expr.args) + len(expr.keywords) == 1):
        return _is_cpu(index, call_arguments(expr)[0][1])
    return False


def _torch_dtype(index: AstIndex, expr: ast.expr) -> Optional[str]:
    qualified = index.qualified_name(expr) or ""
    if qualified.startswith("torch."):
        return _TORCH_DTYPES.get(qualified[len("torch."):])
    return None


def _numpy_dtype(index: AstIndex, expr: ast.expr) -> Optional[str]:
    if isinstance(expr, ast.Constant):
        value = index.literal_string(expr)
        return _NUMPY_DTYPES.get(value) if value is not None else None
    qualified = index.qualified_name(expr) or ""
    if qualified.startswith("numpy."):
        return _NUMPY_DTYPES.get(qualified[len("numpy."):])
    return None


def _has_false_keyword(call: ast.Call, name: str) -> bool:
    value = keyword_value(call, name)
    return value is not None and not is_literal(value, True)


def _positional(call: ast.Call) -> int:
    """How many arguments LibCST calls positional: ``*a`` and ``**k`` included."""
    return len(call.args) + sum(keyword.arg is None for keyword in call.keywords)


def _describe(index: AstIndex, expr: ast.expr, scope: AstScope, depth: int) -> Optional[_Array]:
    """What ``expr`` evaluates to, when it is certainly an ndarray (never a NumPy scalar); else None."""
    if depth > 4:
        return None
    if isinstance(expr, ast.Name):
        return _describe_name(index, expr, scope, depth)
    if not isinstance(expr, ast.Call) or numpy_source(index, expr, scope) is None:
        return None
    qualified = index.qualified_name(expr.func)
    if qualified is not None and qualified.startswith("numpy."):
        func = qualified[len("numpy."):]
        if func == "where" and len(expr.args) + len(expr.keywords) < 3:
            return None  # np.where(cond) is a tuple of arrays
        if func == "unique" and any(k.arg is not None and k.arg.startswith("return_") for k in expr.keywords):
            return None  # a tuple
        if func in _NEGATIVE_STRIDE_FUNCS:
            return _Array(fresh=False, negative_strides=True)
        if func in _READ_ONLY_FUNCS:
            return _Array(fresh=False, read_only=True)
        if func == "load" and (keyword_value(expr, "mmap_mode") is not None or _positional(expr) > 1):
            return _Array(fresh=False, file_backed=True)
        fresh = func in _FRESH_FUNCS and keyword_value(expr, "out") is None
        if func == "array" and _has_false_keyword(expr, "copy"):
            fresh = False
        dtype_arg = keyword_value(expr, "dtype")
        dtype = _numpy_dtype(index, dtype_arg) if dtype_arg is not None else None
        if dtype_arg is None and func in _FLOAT64_BY_DEFAULT and (func.startswith("random.") or _positional(expr) <= 1):
            dtype = "float64"
        return _Array(fresh=fresh, dtype=dtype)
    method = call_name(expr)
    assert isinstance(expr.func, ast.Attribute)
    if method == "numpy":
        return _Array(fresh=False)
    base = _describe(index, expr.func.value, scope, depth + 1)
    if base is None:
        return None
    if method in _COPYING_METHODS and not _has_false_keyword(expr, "copy"):
        dtype = base.dtype
        if method == "astype":
            arguments = call_arguments(expr)
            positional = [value for keyword, value in arguments if keyword is None]
            dtype_arg = positional[0] if positional else keyword_value(expr, "dtype")
            dtype = _numpy_dtype(index, dtype_arg) if dtype_arg is not None else None
        return _Array(dtype=dtype)  # a new contiguous writable array
    if method in _VIEW_METHODS:
        dtype = base.dtype if method != "view" else None
        return _Array(fresh=False, read_only=base.read_only, negative_strides=base.negative_strides,
                      file_backed=base.file_backed, dtype=dtype)
    return None


def _describe_name(index: AstIndex, name: ast.Name, scope: AstScope, depth: int) -> Optional[_Array]:
    memo = index.shared.setdefault("tl104_names", {})
    key = (name.id, id(scope), depth)
    if key not in memo:  # type: ignore[operator]
        memo[key] = _describe_name_uncached(index, name, scope, depth)  # type: ignore[index]
    return memo[key]  # type: ignore[index]


def _describe_name_uncached(index: AstIndex, name: ast.Name, scope: AstScope, depth: int) -> Optional[_Array]:
    values = index.values_of(name.id, scope)
    if not values and scope is not index.tree:
        values = index.values_of(name.id, index.tree)
    if not values or any(v is None for v in values):
        return None
    arrays = []
    for value in values:
        array = _describe(index, value, scope, depth + 1)  # type: ignore[arg-type]
        if array is None:
            return None  # one binding that is not an array settles it
        arrays.append(array)
    dtypes: Set[Optional[str]] = {x.dtype for x in arrays}
    return _Array(
        fresh=False,
        read_only=any(x.read_only for x in arrays),
        negative_strides=any(x.negative_strides for x in arrays),
        file_backed=any(x.file_backed for x in arrays),
        dtype=dtypes.pop() if len(dtypes) == 1 else None,
    )
