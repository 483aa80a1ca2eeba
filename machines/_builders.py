"""Generated code that builds and evolves records at a fraction of attrs' cost.

Every firing builds a new frozen record, and every record a store reads is built from
its stored values; attrs' ``__init__`` and ``attrs.evolve`` call one function per field
validator. :func:`evolver` and :func:`builder` write, with ``exec``, straight-line code
for one record class (its converters and named field rules inline) that raises the same
error first, and fall back to the class itself for anything they cannot mirror exactly.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import types
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from lifecycles.invariants._core import FieldRule, FieldRuleViolation

__all__ = ["builder", "evolver"]

R = TypeVar("R")


def _parts(validator: object) -> tuple[FieldRule, ...]:
    """The named field rules ``validator`` is made of (``and_`` combines them), in order."""
    return tuple(() if validator is None else getattr(validator, "_validators", (validator,)))


def _value_only(validator: object) -> bool:
    """Whether ``validator`` judges a field's value alone: named field rules (and their
    ``and_`` combinations; not a subclass's own ``__call__``) read nothing else."""
    return all(isinstance(part, FieldRule) and type(part).__call__ is FieldRule.__call__
               for part in _parts(validator))


def evolver(record_type: type[R]) -> Callable[[R, dict[str, Any]], R]:
    """``attrs.evolve`` that converts and validates only the changed fields.

    Every field of a frozen record was converted and validated when it was built; when
    every validator is a named field rule (it judges its value alone), a new record needs
    only its changed fields checked (its invariants are checked whole, afterwards). Any
    other class gets ``attrs.evolve``: a validator that reads other fields, pre/post-init
    hooks, fields outside ``__init__`` or aliased, converters taking the instance or field.
    """
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(record_type)  # type: ignore[arg-type]
    if not _goes_straight(record_type, fields):
        return lambda record, changes: attrs.evolve(record, **changes)  # type: ignore[misc]
    # Straight-line code through the slots, rules inline, once per tuple of changed fields
    # (an effect writes the same ones each time): copying and looping were most of apply_row.
    names = tuple(field.name for field in fields)
    plans = {field.name: (at, field.converter, [(rule.optional, rule.check, rule.name)
             for rule in _parts(field.validator)]) for at, field in enumerate(fields)}

    @functools.lru_cache(maxsize=256)  # bounded: a caller may write ever new sets of fields
    def straight(changed: tuple[str, ...]) -> Callable[[R, dict[str, Any]], R]:
        space: dict[str, Any] = {"new": object.__new__, "kind": record_type, "plans": plans,
                                 "broke": FieldRuleViolation}
        space.update((f"put{at}", _setter(record_type, name)) for at, name in enumerate(names))
        lines = [f"put{at}(made, record.{name})" for at, name in enumerate(names)
                 if name not in changed]
        for number, name in enumerate(changed):
            if name not in plans:  # no such field: as ``plans[name]`` raised, in order
                lines.append(f"plans[{name!r}]")
                break
            at, convert, rules = plans[name]
            space[f"convert{number}"] = convert
            lines.append(f"value = convert{number}(changes[{name!r}])" if convert
                         else f"value = changes[{name!r}]")
            for part, (optional, check, rule) in enumerate(rules):  # FieldRule.__call__
                space[f"check{number}_{part}"] = check
                lines.append(f"if not ({'value is None or ' if optional else ''}check{number}_"
                             f"{part}(value)): raise broke({rule!r}, {name!r}, value)")
            lines.append(f"put{at}(made, value)")
        body = "".join(f"    {line}\n" for line in lines)
        exec(f"def evolve(record, changes):\n    made = new(kind)\n{body}    return made\n",
             space)
        return space["evolve"]  # type: ignore[no-any-return]

    def evolve(record: R, changes: dict[str, Any]) -> R:
        return straight(tuple(changes))(record, changes)

    return evolve


def _goes_straight(record_type: type, fields: tuple[attrs.Attribute[Any], ...]) -> bool:
    """Whether generated code may build ``record_type`` as its ``__init__`` would: no
    pre/post-init hooks, every field in ``__init__`` under its own name (code reads
    them), converters of the value alone, validators that are named field rules."""
    return not (
        hasattr(record_type, "__attrs_pre_init__")
        or hasattr(record_type, "__attrs_post_init__")
        or not all(field.init and field.alias == field.name and field.name.isidentifier()
                   and not keyword.iskeyword(field.name) and not field.name.startswith("_lc_")
                   for field in fields)
        or any(isinstance(field.converter, attrs.Converter) for field in fields)
        or not all(_value_only(field.validator) for field in fields)
    )


def builder(record_type: type[R]) -> Callable[..., R]:
    """``record_type(**values)`` as generated code: every field converted in order, then
    every field rule checked in order, as attrs' ``__init__`` does (so the same error
    comes first), without a call per validator; a record read is built this way. The
    fields are the function's parameters, so a missing or unknown one is the same
    ``TypeError``. Any class :func:`evolver` cannot go straight through, or with
    defaults, is built by the class itself."""
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(record_type)  # type: ignore[arg-type]
    if not _goes_straight(record_type, fields) or any(
            field.default is not attrs.NOTHING for field in fields):
        return record_type
    space: dict[str, Any] = {"_lc_new": object.__new__, "_lc_kind": record_type,
                             "_lc_broke": FieldRuleViolation}
    converting, checking, setting = [], [], []
    for at, field in enumerate(fields):
        name = field.name
        if field.converter is not None:
            space[f"_lc_convert{at}"] = field.converter
            converting.append(f"{name} = _lc_convert{at}({name})")
        for part, rule in enumerate(_parts(field.validator)):  # FieldRule.__call__, inline
            space[f"_lc_check{at}_{part}"] = rule.check
            test = f"{'{name} is None or ' if rule.optional else ''}_lc_check{at}_{part}({name})"
            checking.append(f"if not ({test.format(name=name)}):"
                            f" raise _lc_broke({rule.name!r}, {name!r}, {name})")
        space[f"_lc_put{at}"] = _setter(record_type, name)
        setting.append(f"_lc_put{at}(_lc_made, {name})")
    lines = [*converting, *checking, "_lc_made = _lc_new(_lc_kind)", *setting,
             "return _lc_made"]
    body = "".join(f"    {line}\n" for line in lines)
    exec(f"def build({', '.join(field.name for field in fields)}):\n{body}", space)
    return space["build"]  # type: ignore[no-any-return]


def _setter(record_type: type, name: str) -> Callable[[Any, Any], None]:
    """Sets field ``name`` of a new frozen record: through its slot, else past ``__setattr__``."""
    slot = inspect.getattr_static(record_type, name, None)
    if isinstance(slot, types.MemberDescriptorType):
        return slot.__set__
    return lambda new, value: object.__setattr__(new, name, value)
