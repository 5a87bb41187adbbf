"""A safe evaluator for countdown answers: integers, + - * / and parentheses, nothing else.

Model text is parsed with `ast` and walked by hand with exact fractions; no `eval` ever runs.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from fractions import Fraction

MAX_EXPRESSION_CHARS = 64
_OPS: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
}


class InvalidExpression(ValueError):
    pass


def evaluate(text: str) -> tuple[Fraction, list[int]]:
    """The exact value of an arithmetic expression and the integer literals it uses."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise InvalidExpression("expression too long")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise InvalidExpression(str(err)) from None
    numbers: list[int] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise InvalidExpression("division by zero")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
            numbers.append(node.value)
            return Fraction(node.value)
        raise InvalidExpression(f"{type(node).__name__} is not allowed")

    return walk(tree.body), numbers
