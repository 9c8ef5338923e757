"""Hostile input texts for the limit tests and their timing benchmark (``bench/limits.py``), built in one place.

:func:`laughs` is the "billion laughs" YAML document (a few hundred bytes that expand to
``fan_out ** levels`` leaves through aliases); :func:`mooncake_line` is one Mooncake trace record
(a JSON line) whose fields may be any text, so a test can put a huge integer, a NaN or deep
nesting where a number belongs. Pure text builders: no I/O.
"""

from __future__ import annotations

__all__ = ["laughs", "mooncake_line"]


def laughs(levels: int, fan_out: int = 10, head: str = "") -> str:
    """The billion-laughs document: ``head``, then ``levels`` anchors ``a0`` .. ``a{levels-1}``, each a
    list of ``fan_out`` aliases to the one before (``a0`` holds ``fan_out`` strings): the last expands
    to ``fan_out ** levels`` leaves."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * fan_out) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan_out) + "]" for i in range(1, levels)]
    return head + "\n".join(lines) + "\n"


def mooncake_line(timestamp: object = 0, tokens_in: object = 10, tokens_out: object = 5) -> str:
    """One Mooncake trace record and its newline; each value is written as given (``str()``), unquoted."""
    return (f'{{"timestamp": {timestamp}, "input_length": {tokens_in}, "output_length": {tokens_out}, '
            '"hash_ids": [1]}\n')
