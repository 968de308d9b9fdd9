"""The config reference, generated from the config dataclasses themselves so that it cannot drift.

Every key of the run config (:class:`norga.config.Config`), of every registered method section
(:func:`norga.config.method_configs`) and of every registered gate's options
(:data:`norga.gates.modules.GATES`) becomes one table row: key, type, default, allowed values or bounds
(the field's validation metadata) and help. Help is the field's ``help`` metadata if it has one, else
the comment on the field's line, else the comment lines right above the field.

    python -m norga.commands.config_reference > reference.md    # what the docs site's configs page embeds
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
from typing import Dict, Iterator, List, Tuple

from ..config import DEFAULT_METHOD, Config, method_configs
from ..gates.modules import GATES

Row = Tuple[str, str, str, str, str]  # key, type, default, allowed, help


def field_help(cls: type) -> Dict[str, str]:
    """Field name -> help text of a dataclass and its dataclass bases (metadata ``help``, the line's comment, or
    the comments right above the field); a subclass's own text wins."""
    helps: Dict[str, str] = {}
    for base in reversed(cls.__mro__):
        if dataclasses.is_dataclass(base) and base is not object:
            helps.update({k: v for k, v in _own_help(base).items() if v})
    return helps


def _own_help(cls: type) -> Dict[str, str]:
    source = textwrap.dedent(inspect.getsource(cls))
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    lines = source.splitlines()
    helps: Dict[str, str] = {}
    above: List[str] = []
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(comments.get(number, ""))
            continue
        name = stripped.split(":", 1)[0]
        if ":" in stripped and name.isidentifier() and line.startswith("    ") and not line.startswith("     "):
            helps[name] = comments.get(number) or " ".join(above)
        above = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("help"):
            helps[f.name] = f.metadata["help"]
    return helps


def _default(f: dataclasses.Field) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _allowed(f: dataclasses.Field) -> str:
    meta = f.metadata
    if meta.get("choices"):
        return " \\| ".join(f"`{c}`" for c in meta["choices"])
    bounds = [f"{sign} {meta[key]}" for key, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"))
              if meta.get(key) is not None]
    return ", ".join(bounds)


def _text(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).replace("|", "\\|")


def rows(cls: type, prefix: str = "", skip: Tuple[str, ...] = ()) -> Iterator[Row]:
    """Rows of a config dataclass, nested dataclass sections expanded as ``section.key``."""
    helps = field_help(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or f.metadata.get("method"):
            continue
        default = _default(f)
        if dataclasses.is_dataclass(default):
            yield from rows(type(default), f"{prefix}{f.name}.")
            continue
        yield (f"{prefix}{f.name}", str(f.type).replace("|", "\\|"), _text(default), _allowed(f),
               helps.get(f.name, "").replace("|", "\\|"))


def table(items: Iterator[Row], key_title: str = "key") -> List[str]:
    out = [f"| {key_title} | type | default | allowed | help |", "|---|---|---|---|---|"]
    out += [f"| `{key}` | `{kind}` | `{default}` | {allowed} | {text} |" for key, kind, default, allowed, text in items]
    return out


def docstring_first_line(cls: type) -> str:
    return (inspect.getdoc(cls) or "").strip().splitlines()[0] if inspect.getdoc(cls) else ""


def reference() -> str:
    """The whole reference as Markdown (sections: the run, each method, each gate)."""
    top: List[Row] = [("base", "str", "null", "", "a config file this one starts from (path relative to this file): "
                       "mappings merge key by key, lists and scalars are replaced"),
                      ("method.name", "str", DEFAULT_METHOD, " \\| ".join(f"`{n}`" for n in sorted(method_configs())),
                       "the registered method; its options are its section below")]
    out = ["## The run (top level, `data`, `model`, `logging`)", "", *table(iter(top + list(rows(Config)))), ""]
    for name, cls in sorted(method_configs().items()):
        out += [f"## `method.name: {name}`", "", f"{docstring_first_line(cls)} (`{cls.__module__}.{cls.__name__}`)", "",
                *table(rows(cls, skip=("name",)), "key (under `method.`)"), ""]
    out += ["## Gates (`method.gate` of the prefix methods)", ""]
    for name, gate in sorted(GATES.items()):
        options = list(rows(gate.Options))
        out += [f"### `gate: {{name: {name}}}`", "", docstring_first_line(gate), ""]
        out += [*table(iter(options), "option (under `method.gate.`)"), ""] if options else ["No options.", ""]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    sys.stdout.write(reference())
    return 0


if __name__ == "__main__":
    sys.exit(main())
