"""The configuration reference: every key config.toml can hold, rendered as Markdown from the `Settings` models'
field docstrings, and written into the README between two markers.

`python -m code_puppy.config.reference` rewrites that part of the checkout's README.md (or of the file named as its
argument); `tests/test_config_reference.py` fails when the committed text differs from what it renders.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from code_puppy.config.loading import PROJECT_KEYS_WITHOUT_TRUST
from code_puppy.config.settings import Settings

START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"
COMMAND = "python -m code_puppy.config.reference"
"""The one command that brings the README's reference up to date."""
README = Path(__file__).resolve().parents[2] / "README.md"
"""The checkout's README (the package is installed editable in development)."""

_KEYS_AS_WRITTEN: Mapping[tuple[str, str], tuple[str, str]] = {("plugins", "options"): ("[plugins.NAME]", "table")}
"""Fields config.toml does not write under their own name, with their type: `[plugins.NAME]` tables land in
`options`."""
_SCALARS: Mapping[object, str] = {str: "string", bool: "boolean", int: "integer", float: "number", Any: "any"}


def render() -> str:
    """The reference as Markdown: a table for the top-level keys, then one per table of config.toml."""
    sections: list[str] = []
    for name, field in Settings.model_fields.items():
        model, keyed = _table_model(field.annotation)
        if model is None:
            continue
        heading = f"[{name}.NAME]" if keyed else f"[{name}]"
        sections += _section(name, heading, model)
    intro = [
        f"<!-- generated from code_puppy/config/settings.py by `{COMMAND}`; edit the docstrings there, not this -->",
        "",
        '"Project" says whether a project\'s `.code-puppy/config.toml` may set the key on its own ("yes") or only',
        'once you trust the project ("trusted"; see Trust above). A key whose default is "unset" has no value until',
        "you give it one; its description says what happens then.",
        "",
        "#### Top level",
        "",
    ]
    return "\n".join(intro + _table("", Settings) + sections).rstrip() + "\n"


def _section(key: str, heading: str, model: type[BaseModel]) -> list[str]:
    lines = [f"#### `{heading}`", ""]
    if doc := _model_doc(model):
        lines += [doc, ""]
    lines += _table(key, model)
    holders: dict[type[BaseModel], list[str]] = {}  # tables an entry may be written as, e.g. `[permissions] allow`'s
    for name, field in model.model_fields.items():
        for element in _element_models(field.annotation):
            holders.setdefault(element, []).append(f"`{name}`")
    for element, names in holders.items():
        lines += [f"#### `{heading}` {' and '.join(names)} written as a table", ""]
        if doc := _model_doc(element):
            lines += [doc, ""]
        lines += _table(key, element)
    return lines


def _table(section: str, model: type[BaseModel]) -> list[str]:
    rows = ["| key | type | default | project | what it does |", "|---|---|---|---|---|"]
    docs = field_docs(model)
    fields = [
        (name, field) for name, field in model.model_fields.items() if section or not _table_model(field.annotation)[0]
    ]
    for name, field in fields:
        key, kind = _KEYS_AS_WRITTEN.get((section, name), (name, _type(field)))
        cells = (f"`{key}`", kind, _default(field), _project(section, name), _cell(docs.get(name, "")))
        rows.append("| " + " | ".join(cells) + " |")
    return [*rows, ""]


def _project(section: str, name: str) -> str:
    """Whether a project's config may set `[section] name` without trust (`PROJECT_KEYS_WITHOUT_TRUST`)."""
    key = section or name
    if key not in PROJECT_KEYS_WITHOUT_TRUST:
        return "trusted"
    keys = PROJECT_KEYS_WITHOUT_TRUST[key]
    return "yes" if keys is None or not section or name in keys else "trusted"


def _type(field: FieldInfo) -> str:
    text = _type_name(field.annotation)
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Gt):
            text += f" > {bound.gt}"
        elif isinstance(bound, annotated_types.Ge):
            text += f" ≥ {bound.ge}"
    return text


def _type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " or ".join(f'`"{value}"`' for value in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in args if arg is not type(None))
    if origin is tuple:
        return f"list of {_plural(_type_name(args[0]))}"
    if origin is dict:
        return f"table of {_plural(_type_name(args[1]))}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return _scalar_name(cast(object, annotation))


def _scalar_name(annotation: object) -> str:
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    return str(getattr(annotation, "__name__", annotation))


def _plural(name: str) -> str:
    if " or " in name:
        return f"({name})"
    return {"any": "anything", "table of anything": "tables"}.get(name, name if name.startswith("`") else f"{name}s")


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # pyright: ignore[reportCallIssue]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return "unset" if value is None else f"`{_toml(value)}`"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + "}"  # pyright: ignore[reportUnknownVariableType]
    return str(value)


def _table_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a top-level key holds, and whether it holds one per name (`[models.NAME]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if get_origin(annotation) is dict:
        value = get_args(annotation)[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value, True
    return None, False


def _element_models(annotation: Any) -> list[type[BaseModel]]:
    """The models an entry of a list (or a union) may be written as: `{ command = …, sandbox = false }`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) is dict:
        return []
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found += [model for model in _element_models(arg) if model not in found]
    return found


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """The docstring written under each field in `model`'s class body, by field name.

    Read from the source rather than through pydantic's `use_attribute_docstrings`, which would parse the source at
    every start-up."""
    body = ast.parse(textwrap.dedent(inspect.getsource(model))).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    for statement, following in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _model_doc(model: type[BaseModel]) -> str:
    doc = model.__doc__ or ""
    if doc.startswith(f"{model.__name__}("):  # pydantic's generated signature: no docstring of its own
        return ""
    return " ".join(doc.split())


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def updated(text: str) -> str:
    """`text` (a README) with the reference between the markers replaced by a fresh rendering."""
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"the markers {START} and {END} are not both there")
    return f"{head}{START}\n{render()}{END}{tail}"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else README
    try:
        text = path.read_text(encoding="utf-8")
        new = updated(text)
    except (OSError, ValueError) as exc:
        print(f"{COMMAND}: {path}: {exc}", file=sys.stderr)
        return 2
    if new != text:
        path.write_text(new, encoding="utf-8")
        print(f"updated the configuration reference in {path}")
    else:
        print(f"the configuration reference in {path} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
