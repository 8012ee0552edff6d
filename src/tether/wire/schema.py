"""The slow path of validation: explain, field by field, why a message was rejected.

The Structs in :mod:`tether.wire.messages` are the schema. The fast decoder applies them
natively; when it refuses a line, this module re-checks the generic JSON value stage by
stage (envelope, type, payload) to give the spec's code and a reason such as
``"text is required; ref must be at least 1"``. It also accepts what a JSON Schema
validator accepts and msgspec does not: integral floats (``1.0``) where an integer is
due, which it rewrites to ``int`` before building the Struct.

Field rules are read from the Structs with :mod:`msgspec.inspect` on first use, so
importing :mod:`tether.wire` stays cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import msgspec
import msgspec.inspect as mi

from tether.wire.limits import MAX_SAFE_INTEGER

_NAMES = {
    mi.StrType: "a string",
    mi.BoolType: "a boolean",
    mi.IntType: "an integer",
    mi.FloatType: "a finite number",
    mi.DictType: "an object",
    mi.ListType: "an array",
}


@dataclass(frozen=True, slots=True)
class FieldRule:
    """One payload field: its wire name, whether it is required, and its msgspec type."""

    name: str
    required: bool
    type: mi.Type


@cache
def rules_for(cls: type[msgspec.Struct]) -> tuple[FieldRule, ...]:
    """The payload rules of a message class (envelope fields excluded)."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return tuple(
        FieldRule(f.encode_name, f.required, f.type)
        for f in info.fields
        if f.encode_name not in ("v", "seq", "run")
    )


def is_integer(value: object) -> bool:
    """A JSON integer: an int that is not a bool, or an integral finite float."""
    if type(value) is int:
        return True
    if isinstance(value, float):
        return math.isfinite(value) and value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


def safe_int(value: object) -> int | None:
    """``value`` as an int when it is an integer within +/- 2^53-1, else None."""
    if type(value) is int:
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None
    if is_integer(value) and abs(value) <= MAX_SAFE_INTEGER:  # type: ignore[arg-type]
        return int(value)  # type: ignore[call-overload,no-any-return]
    return None


def check_value(path: str, value: object, typ: mi.Type, errors: list[tuple[str, str]]) -> None:
    """Append ``(field, message)`` pairs for every way ``value`` fails ``typ``."""
    if isinstance(typ, mi.AnyType):
        return
    if isinstance(typ, mi.UnionType):
        kinds = list(typ.types)
        if len(kinds) == 1:
            check_value(path, value, kinds[0], errors)
            return
    if isinstance(typ, mi.LiteralType):
        if value not in typ.values or isinstance(value, bool):
            allowed = ", ".join(str(v) for v in typ.values)
            errors.append((path, f"must be one of {allowed}"))
        return
    if not _matches(value, typ):
        errors.append((path, f"must be {_NAMES.get(type(typ), 'valid')}"))
        return
    if isinstance(typ, mi.IntType | mi.FloatType):
        _check_range(path, value, typ, errors)
    elif isinstance(typ, mi.ListType):
        assert isinstance(value, list)
        for index, item in enumerate(value):
            check_value(f"{path}[{index}]", item, typ.item_type, errors)


def _matches(value: object, typ: mi.Type) -> bool:
    if isinstance(typ, mi.StrType):
        return isinstance(value, str)
    if isinstance(typ, mi.BoolType):
        return isinstance(value, bool)
    if isinstance(typ, mi.IntType):
        return is_integer(value)
    if isinstance(typ, mi.FloatType):
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
    if isinstance(typ, mi.DictType):
        return isinstance(value, dict)
    if isinstance(typ, mi.ListType):
        return isinstance(value, list)
    return False


def _check_range(
    path: str, value: Any, typ: mi.IntType | mi.FloatType, errors: list[tuple[str, str]]
) -> None:
    if isinstance(typ, mi.FloatType):
        return  # finiteness is the only float rule, checked by _matches
    if typ.ge is not None and value < typ.ge:
        errors.append((path, f"must be at least {typ.ge}"))
    if typ.le is not None and value > typ.le:
        errors.append((path, f"must be at most {typ.le}"))


def check_payload(cls: type[msgspec.Struct], obj: dict[str, Any]) -> list[tuple[str, str]]:
    """Every payload error of ``obj`` for message class ``cls``; empty when it is valid."""
    errors: list[tuple[str, str]] = []
    for rule in rules_for(cls):
        if rule.name not in obj:
            if rule.required:
                errors.append((rule.name, "is required"))
            continue
        check_value(rule.name, obj[rule.name], rule.type, errors)
    acked = "ref" in obj or obj.get("status") == "rejected"
    if not errors and not acked and cls.__name__ == "ControlAck":
        errors.append(("ref", "is required unless status is rejected"))
    return errors


def integral_copy(cls: type[msgspec.Struct], obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with integral floats in integer fields (and the envelope) turned into ints."""
    out = dict(obj)
    for key in ("v", "seq"):
        if isinstance(out.get(key), float):
            out[key] = int(out[key])
    for rule in rules_for(cls):
        value = out.get(rule.name)
        if isinstance(value, float) and _wants_int(rule.type):
            out[rule.name] = int(value)
        elif isinstance(value, list) and _wants_int_items(rule.type):
            out[rule.name] = [int(v) if isinstance(v, float) else v for v in value]
    return out


def _unwrap(typ: mi.Type) -> mi.Type:
    if isinstance(typ, mi.UnionType):
        kinds = list(typ.types)
        if len(kinds) == 1:
            return kinds[0]
    return typ


def _wants_int(typ: mi.Type) -> bool:
    return isinstance(_unwrap(typ), mi.IntType)


def _wants_int_items(typ: mi.Type) -> bool:
    inner = _unwrap(typ)
    return isinstance(inner, mi.ListType) and isinstance(inner.item_type, mi.IntType)
