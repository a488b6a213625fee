"""Which expressions certainly evaluate to a NumPy array (never a NumPy scalar): what `torch.tensor(x)`
copies (TL104) and what a `.item()` on it does not sync (TL101)."""

from __future__ import annotations

import ast
from typing import Optional

from torchlint.facts.index import AstIndex, AstScope, call_name

# numpy functions that always return an ndarray, whatever their arguments. Anything else (reductions,
# ufuncs, np.float32(...)) may return a numpy scalar, which torch.from_numpy rejects: not ours to flag.
NUMPY_ARRAY_FUNCS = {
    "array", "asarray", "ascontiguousarray", "asfortranarray", "copy", "zeros", "ones", "empty", "full",
    "zeros_like", "ones_like", "empty_like", "full_like", "arange", "linspace", "logspace", "geomspace",
    "eye", "identity", "diag", "load", "loadtxt", "genfromtxt", "fromfile", "frombuffer", "fromiter",
    "fromstring", "stack", "concatenate", "vstack", "hstack", "dstack", "column_stack", "tile", "repeat",
    "transpose", "reshape", "flip", "fliplr", "flipud", "rot90", "expand_dims", "squeeze", "pad", "sort",
    "argsort", "unique", "cumsum", "diff", "outer", "clip", "where", "random.permutation",
    "random.randint", "random.choice", "random.rand", "random.randn", "random.random", "random.uniform",
    "random.normal", "random.standard_normal", "random.random_sample",
}
# np.random.rand() with no size is a float; with a size, an array: how many positional arguments make one.
NUMPY_RANDOM_SIZE_POSITION = {
    "random.rand": 1, "random.randn": 1, "random.random": 1, "random.random_sample": 1,
    "random.standard_normal": 1, "random.uniform": 3, "random.normal": 3, "random.randint": 3,
    "random.choice": 2,
}
# Methods of an ndarray that return an ndarray.
NDARRAY_METHODS = {"astype", "copy", "reshape", "transpose", "flatten", "ravel", "squeeze", "view"}


def numpy_source(index: AstIndex, expr: ast.expr, scope: Optional[AstScope] = None) -> Optional[str]:
    """What made the array ``expr`` certainly is: "numpy.zeros", "numpy.frombuffer", ".numpy()"...

    None where ``expr`` is not certainly an ndarray. A name counts only when every binding of it in
    its scope (or, if unbound there, at module level) is an array.
    """
    return _numpy_source(index, expr, scope if scope is not None else index.scope_of(expr), 0)


def _numpy_source(index: AstIndex, expr: ast.expr, scope: AstScope, depth: int) -> Optional[str]:
    if depth > 4:
        return None
    if isinstance(expr, ast.Call):
        qualified = index.qualified_name(expr.func)
        if qualified is not None and qualified.startswith("numpy."):
            func = qualified[len("numpy."):]
            if func not in NUMPY_ARRAY_FUNCS:
                return None
            if func in NUMPY_RANDOM_SIZE_POSITION and not _has_size_arg(expr, func):
                return None
            return qualified
        if not isinstance(expr.func, ast.Attribute):
            return None
        method = call_name(expr)
        if method == "numpy" and not expr.args and not expr.keywords:
            return ".numpy()"
        if method in NDARRAY_METHODS:
            return _numpy_source(index, expr.func.value, scope, depth + 1)
        return None
    if isinstance(expr, ast.Name):
        # The answer for a name depends only on its scope's bindings: computed once per name, scope and
        # depth (a name rebound n times, used n times, would cost n*n), stopping at the first non-array.
        memo = index.shared.setdefault("numpy_names", {})
        key = (expr.id, id(scope), depth)
        if key in memo:
            return memo[key]  # type: ignore[index]
        values = index.values_of(expr.id, scope) or (
            index.values_of(expr.id, index.tree) if scope is not index.tree else [])
        first: Optional[str] = None
        for value in values:
            source = _numpy_source(index, value, scope, depth + 1) if value is not None else None  # type: ignore[arg-type]
            if source is None:
                first = None
                break
            first = first or source
        memo[key] = first  # type: ignore[index]
        return first
    return None


def _has_size_arg(call: ast.Call, func: str) -> bool:
    """np.random.rand(3) and np.random.normal(0, 1, size=5) make arrays; np.random.rand() a float. (As
    LibCST counts them, `*a` and `**k` are positional.)"""
    if any(keyword.arg == "size" for keyword in call.keywords):
        return True
    positional = len(call.args) + sum(keyword.arg is None for keyword in call.keywords)
    return positional >= NUMPY_RANDOM_SIZE_POSITION[func]
