"""Queries the ORM compiles once per process: ``Prepared``.

Building a queryset and compiling it costs the web process more CPU than PostgreSQL takes to answer
the small indexed reads every API request makes (the price book, the last cycle, a team's finished
runs). A ``Prepared`` query is built by the ORM once, with stand-in parameter values, and then run
with new values in their places: the same SQL text and the same per-column converters
``values_list`` applies, without the ORM's work on every request. Only parameters the ORM passes
through as they are can be stand-ins (numbers, strings; not lists: ``__in`` expands to one
placeholder per element). The tests of each user compare its rows with the ORM's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection
from django.db.models import QuerySet

# The SQL, each parameter's stand-in name (and the driver's type the ORM wraps it in), the columns'
# converters, the number of columns asked for.
_Compiled = tuple[str, list[tuple[str, Any]], list[tuple[int, tuple[Any, Any]]], int]


class Prepared:
    """``build(**stand_ins)``'s SQL (a ``values_list`` queryset), compiled on first use; ``rows(**values)``
    runs it with each stand-in's place taken by the value of the same name. Every stand-in value must
    be distinct and stand for nothing else in the query (a value that also appears as a constant of
    the query would be taken for the parameter): building fails loudly when a compiled parameter is
    none of them."""

    def __init__(self, build: Callable[..., QuerySet], **stand_ins: Any) -> None:
        self.build, self.stand_ins = build, stand_ins
        if len({(type(value), value) for value in stand_ins.values()}) != len(stand_ins):
            raise ValueError("stand-in values must be distinct")
        self._compiled: _Compiled | None = None

    def _compile(self) -> _Compiled:
        if self._compiled is None:
            compiler = self.build(**self.stand_ins).query.get_compiler(connection=connection)
            sql, params = compiler.as_sql()
            order = []
            for value in params:
                # The ORM may wrap a value in a type of the driver's (psycopg's ``Int4`` for an integer
                # column): the value taking its place is wrapped alike.
                found = [n for n, v in self.stand_ins.items() if isinstance(value, type(v)) and value == v]
                if len(found) != 1:
                    raise ValueError(f"a parameter that is no stand-in: {value!r} in {sql}")
                order.append((found[0], None if type(value) is type(self.stand_ins[found[0]]) else type(value)))
            count = compiler.col_count  # the columns asked for (a DISTINCT's ordering columns follow)
            converters = list(compiler.get_converters([column[0] for column in compiler.select[:count]]).items())
            self._compiled = (sql, order, converters, count)
        return self._compiled

    def rows(self, **values: Any) -> list[tuple[Any, ...]]:
        sql, order, converters, count = self._compile()
        with connection.cursor() as cursor:
            cursor.execute(sql, [values[name] if wrap is None else wrap(values[name]) for name, wrap in order])
            rows = cursor.fetchall()
        if not converters:
            return [row if len(row) == count else row[:count] for row in rows]
        out = []
        for row in rows:
            found = list(row[:count])
            for i, (convert, expression) in converters:
                for one in convert:
                    found[i] = one(found[i], expression, connection)
            out.append(tuple(found))
        return out
