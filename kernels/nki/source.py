"""Python's ``and`` and ``or`` in a kernel's own source, where NKI reads them as the logical
operators of masks: ``mask=(ix < n and iy < m)`` keeps the positions where both comparisons
hold, as ``&`` does (the vendor's examples write both).

Python cannot give ``and`` that meaning at run time (it asks each operand's truth value), so
the kernel function is compiled again from its source with each ``a and b`` / ``a or b``
turned into a call that evaluates ``a``, and ``b`` only where Python would: an index
comparison on the left is joined to the right with ``&`` (``|`` for ``or``, which masks
refuse by name); any other value keeps Python's meaning, short-circuit included. The
recompiled function has the kernel's file and line numbers, globals and defaults; a function
whose source is not available, that closes over variables of an enclosing function, or that
has no ``and`` / ``or`` at all runs as written.
"""

from __future__ import annotations
import __future__

import ast
import functools
import inspect
import textwrap

from .tracer import Mask, Predicate

__all__ = ["with_mask_logic"]

_AND, _OR = "__nki_and__", "__nki_or__"


def _and(left, right):
    if isinstance(left, (Mask, Predicate)):
        return left & right()
    return right() if left else left


def _or(left, right):
    if isinstance(left, (Mask, Predicate)):
        return left | right()
    return left if left else right()


class _BoolOps(ast.NodeTransformer):
    def __init__(self):
        self.found = False

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        self.found = True
        name = _AND if isinstance(node.op, ast.And) else _OR
        out = node.values[0]
        for value in node.values[1:]:
            thunk = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], vararg=None,
                                                  kwonlyargs=[], kw_defaults=[], kwarg=None,
                                                  defaults=[]), body=value)
            out = ast.Call(func=ast.Name(name, ast.Load()), args=[out, thunk], keywords=[])
            ast.copy_location(thunk, value)
            ast.copy_location(out, node)
        return out


@functools.cache
def with_mask_logic(func):
    """``func``, or the same function compiled again with mask-aware ``and`` / ``or``."""
    code = getattr(func, "__code__", None)
    if code is None or code.co_freevars:
        return func
    try:
        lines, first = inspect.getsourcelines(func)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return func
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, ast.FunctionDef) or fn.name != func.__name__:
        return func
    fn.decorator_list = []
    ops = _BoolOps()
    fn = ops.visit(fn)
    if not ops.found:
        return func
    ast.increment_lineno(fn, first - 1)
    maker = ast.FunctionDef(
        name="__nki_make__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(_AND), ast.arg(_OR)], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[fn, ast.Return(ast.Name(fn.name, ast.Load()))], decorator_list=[],
        returns=None)
    module = ast.fix_missing_locations(ast.Module(body=[maker], type_ignores=[]))
    flags = 0
    for feature in __future__.all_feature_names:
        flag = getattr(__future__, feature).compiler_flag
        if code.co_flags & flag:
            flags |= flag
    try:
        compiled = compile(module, code.co_filename, "exec", flags=flags, dont_inherit=True)
    except SyntaxError:
        return func
    scope: dict = {}
    exec(compiled, func.__globals__, scope)
    out = scope["__nki_make__"](_and, _or)
    out.__defaults__, out.__kwdefaults__ = func.__defaults__, func.__kwdefaults__
    functools.update_wrapper(out, func)
    return out
