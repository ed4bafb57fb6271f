"""The key a misspelled policy key was meant to be (`aprovers` -> `approvers`), so that
`approval-bot check` can say "did you mean `approvers`?" beside an unknown key.

The keys allowed at a place are read from the policy's own models, following the error's
location through them (mappings of channels or teams, lists of tool rules) as far as it goes.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel


def _bare(kind: Any) -> Any:
    """`kind` without `Annotated[...]` and without `| None`."""
    while True:
        origin = get_origin(kind)
        if origin is Annotated:
            kind = get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            kinds = [k for k in get_args(kind) if k is not type(None)]
            if len(kinds) != 1:
                return kind
            kind = kinds[0]
        else:
            return kind


def keys_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The keys `model` allows at the mapping `loc` leads to ([] when it leads to none)."""
    kind: Any = model
    for part in loc:
        kind = _bare(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(part))
            if field is None:
                return []
            kind = field.annotation
        elif get_origin(kind) in (dict, list) and get_args(kind):
            kind = get_args(kind)[-1]  # a channel's, a team's, a tool rule's value
        else:
            return []
    kind = _bare(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def meant(model: type[BaseModel], loc: Sequence[int | str]) -> str | None:
    """The allowed key closest to the unknown one at `loc` (its last part), if one is close."""
    if not loc:
        return None
    close = difflib.get_close_matches(str(loc[-1]), keys_at(model, loc[:-1]), n=1, cutoff=0.7)
    return close[0] if close else None
