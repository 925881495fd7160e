"""The API's JSON parser, bounded: body size, nesting depth and NUL characters.

A body past ``API_MAX_BODY_BYTES`` is a 413; JSON nested deeper than ``API_MAX_JSON_DEPTH`` or
holding a NUL character (PostgreSQL's JSON and text columns refuse it) is a 400 naming where. The
depth is measured before the object is walked by anything recursive (a thousand nested arrays made
Python's ``json`` and our own validators overflow the stack).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class RequestTooLarge(ParseError):
    status_code = 413
    default_detail = "request body too large"
    default_code = "too_large"


def json_problem(value: Any, *, max_depth: int) -> tuple[str, str] | None:
    """``(where, why)`` for the first nesting or NUL problem in a parsed JSON value, None if clean.

    Iterative, so a hostile depth cannot overflow the stack here either."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if depth > max_depth:
            return path or "body", f"JSON nested deeper than {max_depth} levels"
        if isinstance(item, str):
            if "\x00" in item:
                return path or "body", "holds a NUL character"
        elif isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key:
                    return f"{path}.{key!r}" if path else "body", "a key holds a NUL character"
                stack.append((child, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))
    return None


def depth_prescan(raw: bytes, max_depth: int) -> bool:
    """Whether the raw JSON opens more than ``max_depth`` brackets at once (ignoring string contents)."""
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > max_depth:
                return True
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return False


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.API_MAX_BODY_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge({"body": [f"larger than {limit} bytes"]})
        if not raw.strip():
            return {}
        max_depth = settings.API_MAX_JSON_DEPTH
        # +1: the body's own object is level 1, its fields' values level 2.
        if depth_prescan(raw, max_depth + 1):
            raise ParseError({"body": [f"JSON nested deeper than {max_depth} levels"]})
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError({"body": [f"JSON parse error: {exc}"]}) from None
        if problem := json_problem(data, max_depth=max_depth + 1):
            where, why = problem
            raise ParseError({where: [why]})
        return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
