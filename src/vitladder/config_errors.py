"""Hydra's and OmegaConf's composition errors as one line that says what to do.

Hydra reports a bad override on several lines and exits 1; the project promises one line and exit 2.
The checking itself is Hydra's and OmegaConf's (the schema in config_schema.py); this module only words it.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Sequence

from omegaconf import DictConfig, OmegaConf

from vitladder.config_schema import data_schemas, data_sources_with, schema_keys
from vitladder.errors import UserError

_ALREADY_SET = re.compile(r"An item is already at '([^']+)'")
Compose = Callable[[Sequence[str]], DictConfig]  # the config composed again with these overrides, unchecked


def explain(error: BaseException, overrides: Sequence[str], compose: Compose) -> UserError:
    """The UserError for a failed composition (or schema check) of the config with `overrides`; `compose`
    (config.compose_unchecked) shows a key's current value."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    cause = error.__cause__ if error.__cause__ is not None else error
    if isinstance(error, OverrideParseException):
        return UserError(
            f"malformed override {error.override!r} ({error.message.strip().splitlines()[0]}): write key=value, "
            "quoting a value with spaces or brackets, e.g. 'data.root=\"/data/my cifar\"'"
        )
    if isinstance(error, MissingConfigException):
        return UserError(_missing_option(str(error)))
    already = _ALREADY_SET.search(str(error))
    if already:
        key = already.group(1)
        given = next((o for o in overrides if o.lstrip("+").partition("=")[0] == key), f"+{key}=...")
        return UserError(f"{given}: {key} is already a key; set it without the +: {given.lstrip('+')}")
    full_key = getattr(cause, "full_key", None)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and full_key:
        return UserError(unknown_key(full_key, getattr(cause, "object_type", None)))
    if isinstance(cause, ValidationError) and full_key:
        return UserError(_wrong_type(full_key, overrides, compose))
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()] or [type(error).__name__]
    return UserError(f"{lines[0].rstrip('.')} (overrides: {' '.join(overrides)})")


def unknown_key(key: str, node_type: type | None = None) -> str:
    """`optim.lrr: no such key; did you mean optim.lr?`, from the schema's keys."""
    known = schema_keys()
    parent, _, name = key.rpartition(".")
    if parent == "data" and data_sources_with(name):
        chosen = next((n for n, schema in data_schemas().items() if schema is node_type), None)
        sources = " or ".join(f"data={source}" for source in data_sources_with(name))
        return f"{key}: no such key{f' with data={chosen}' if chosen else ''}; it belongs to {sources}"
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"{key}: no such key; did you mean {close[0]}?"
    siblings = sorted(
        {k[len(parent) + 1 :].split(".")[0] for k in known if k.startswith(f"{parent}.")}
        if parent
        else {k.split(".")[0] for k in known}
    )
    where = f"{parent} has" if parent else "the top level has"
    return f"{key}: no such key; {where} {', '.join(siblings)} (see python train.py --help)"


def _missing_option(message: str) -> str:
    """`data=imagenet`: Hydra's "Could not find 'data/imagenet'" with its list of options, on one line."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    found = re.search(r"Could not find '([^']+)'", lines[0])
    if not found or not any(line.startswith("Available options") for line in lines):
        return lines[0]
    group, _, option = found.group(1).partition("/")  # the groups are top-level: `data=../etc` is data
    start = next(i for i, line in enumerate(lines) if line.startswith("Available options"))
    options = [line for line in lines[start + 1 :] if " " not in line and "=" not in line]
    return f"{group}={option}: no such choice (conf/{group}/{option}.yaml); choose one of {', '.join(options)}"


def _wrong_type(key: str, overrides: Sequence[str], compose: Compose) -> str:
    """`trainer.max_epochs='abc' is not valid: trainer.max_epochs takes an integer, e.g. trainer.max_epochs=100`."""
    key = re.sub(r"\[\d+\]$", "", key)  # optim.betas[0]: an item of a list
    given = next((o for o in overrides if o.lstrip("+~").partition("=")[0] == key), None)
    value = given.partition("=")[2] if given else "?"
    example = _current_value(key, [o for o in overrides if o is not given], compose)
    return f"{key}={value!r} is not valid: {key} takes {_kind(key)}" + (
        f", e.g. {key}={example}" if example not in (None, "null") else ""
    )


def _kind(key: str) -> str:
    """What the schema's type for `key` accepts, in words."""
    keys = schema_keys()
    if key not in keys:
        return "a block of keys, e.g. " + next(k for k in keys if k.startswith(f"{key}.")) + "=..."
    hint = keys[key]
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    optional = type(None) in typing.get_args(hint)
    if optional:
        hint = args[0]
    origin = typing.get_origin(hint) or hint
    words = {bool: "true or false", int: "an integer", float: "a number", str: "text"}
    if origin is list:
        kind = {int: "a list of integers", float: "a list of numbers"}.get(typing.get_args(hint)[0], "a list")
    else:
        kind = words.get(origin, "another kind of value")
    return f"{kind} or null" if optional else kind


def _current_value(key: str, overrides: Sequence[str], compose: Compose) -> str | None:
    """`key`'s value on the command line's syntax, composed without the faulty override; None if that fails."""
    try:
        value = OmegaConf.select(compose(overrides), key)
    except Exception:  # the example is a courtesy: any other mistake is reported once that one is fixed
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if OmegaConf.is_list(value):
        return f"[{','.join(str(v) for v in value)}]"
    return None if OmegaConf.is_config(value) else str(value)
