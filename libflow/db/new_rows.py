"""New model instances made without Tortoise's per-field work: the record of every run.

``Model(**values)`` checks and converts each value it is given and works out each
default through ``__setattr__``: on runsync it cost about as much as running a small
workflow. The callers here give values already of their fields' Python types (the
database's constraints still check them on insert), so only the defaults are worked out,
once per model, and everything goes into the instance at once.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tortoise.backends.base.client import BaseDBAsyncClient
from tortoise.models import Model

M = TypeVar("M", bound=Model)

_COPIED_AS_IS = (int, float, str, bool, bytes)


@functools.cache
def _defaults(model: type[Model]) -> tuple[tuple[str, Callable[[], Any]], ...]:
    """(field, how to make its default) for every field ``Model.__init__`` would default."""
    meta = model._meta
    made: list[tuple[str, Callable[[], Any]]] = []
    for name in sorted(meta.fields - meta.fetch_fields):
        field = meta.fields_map[name]
        default = field.default
        if inspect.iscoroutinefunction(default):
            raise TypeError(f"{model.__name__}.{name}: an async default is not supported here")
        if callable(default):
            made.append((name, default))
        elif default is not None:
            if isinstance(default, _COPIED_AS_IS):
                made.append((name, functools.partial(lambda value: value, default)))
            else:
                made.append((name, functools.partial(copy.deepcopy, default)))
        elif field.has_db_default():
            made.append((name, field.get_db_default_value))
        else:
            made.append((name, lambda: None))
    return tuple(made)


def new_instance(model: type[M], **values: Any) -> M:
    """``model(**values)`` for values of their fields' Python types: an unsaved instance."""
    defaults = {name: make() for name, make in _defaults(model) if name not in values}
    return filled_instance(model, {**defaults, **values}, in_db=False)


def filled_instance(model: type[M], values: dict[str, Any], *, in_db: bool) -> M:
    """An instance holding ``values`` (every field, of its Python type) in the state Tortoise
    gives one it read from the database (``in_db``) or one made new; nothing is checked."""
    instance = model.__new__(model)
    state = instance.__dict__
    state.update(values)
    state["_partial"] = False
    state["_saved_in_db"] = in_db
    meta = model._meta
    state["_custom_generated_pk"] = in_db and meta.db_pk_column not in meta.generated_db_fields
    state["_await_when_save"] = {}
    return instance


def insert_statement(
    client: BaseDBAsyncClient, model: type[Model], rows: Sequence[Model]
) -> tuple[str, list[list[Any]]] | None:
    """The INSERT ``bulk_create`` would run for ``rows``, and each row's values; None when
    the model has columns the database fills (generated keys, database defaults), which
    only ``bulk_create`` handles."""
    meta = model._meta
    if meta.generated_db_fields or any(f.has_db_default() for f in meta.fields_map.values()):
        return None
    executor = client.executor_class(model=model, db=client)
    fields_map = meta.fields_map
    columns = executor.regular_columns
    values = [
        [fields_map[name].to_db_value(getattr(row, name), row) for name in columns] for row in rows
    ]
    return executor.insert_query, values
