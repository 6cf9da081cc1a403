"""Choices made once for the whole deployment: the first process's is every process's."""

from __future__ import annotations

import contextlib

from tortoise.exceptions import IntegrityError

from libflow.models import DeploymentChoice


async def chosen_once(name: str, proposed: str) -> str:
    """The deployment's choice ``name``: ``proposed``, unless a process recorded one first.

    Two processes proposing at once both insert; the database keeps one row, and both
    read it back.
    """
    recorded = await DeploymentChoice.get_or_none(name=name)
    if recorded is None:
        with contextlib.suppress(IntegrityError):
            await DeploymentChoice.create(name=name, value=proposed)
        recorded = await DeploymentChoice.get(name=name)
    return recorded.value
