"""A griffe extension (mkdocs.yml loads it): the front doors read as the functions they are.

`scaled_dot_product_attention = forward_door(attention_of)` reads to griffe's static analysis as
an attribute with no docstring, and `@decode_door def decode_attention(query, key, value,
options)` as a function taking `options`; each is imported and shown with the door's own
signature and docstring (scratch.core.front_doors and scratch.decode.attention write both).
A class made by `@with_mask_params` shows its runtime docstring (the registered masks'
parameters, each described by its Param's words).
"""

import inspect
import re
import sys
from pathlib import Path

import griffe

ROOT = str(Path(__file__).resolve().parents[1])  # this checkout's scratch, not an installed one

DOOR = re.compile(r"^(\w+_)?door\(")  # door(...), forward_door(...), decode_door(...), ...
DERIVED = {"with_mask_params"}  # class decorators that write the class's docstring


def _parameter(p: inspect.Parameter) -> griffe.Parameter:
    """One parameter of an inspect signature as griffe's."""
    default = None if p.default is inspect.Parameter.empty else repr(p.default)
    annotation = None if p.annotation is inspect.Parameter.empty else str(p.annotation)
    kind = griffe.ParameterKind(p.kind.description)
    return griffe.Parameter(p.name, annotation=annotation, kind=kind, default=default)


def _runtime(path: str) -> object:
    """The object at `path` (scratch.x.y), imported from this checkout."""
    return griffe.dynamic_import(path, [ROOT, *sys.path])  # it replaces sys.path meanwhile


def _docstring(obj: object, at: griffe.Object, agent: griffe.Visitor) -> griffe.Docstring:
    """obj's runtime docstring for `at`, parsed as the visitor parses every other docstring
    (mkdocs.yml's style; `at`'s signature gives the types)."""
    return griffe.Docstring(
        inspect.getdoc(obj),
        lineno=at.lineno,
        parent=at,
        parser=agent.docstring_parser,
        parser_options=agent.docstring_options,
    )


def _parameters(door: object) -> griffe.Parameters:
    """The door's signature as griffe's parameters."""
    return griffe.Parameters(*map(_parameter, inspect.signature(door).parameters.values()))


class FrontDoors(griffe.Extension):
    """Show every door-made function with the door's signature and docstring."""

    def on_attribute_instance(
        self, *, attr: griffe.Attribute, agent: griffe.Visitor, **kwargs: object
    ) -> None:
        """`name = *_door(impl)` becomes a Function."""
        if attr.value is None or not DOOR.match(str(attr.value)):
            return
        door = _runtime(attr.path)
        function = griffe.Function(
            attr.name,
            lineno=attr.lineno,
            endlineno=attr.endlineno,
            parameters=_parameters(door),
            returns=str(inspect.signature(door).return_annotation),
        )
        function.docstring = _docstring(door, function, agent)
        attr.parent.set_member(attr.name, function)

    def on_function_instance(
        self, *, func: griffe.Function, agent: griffe.Visitor, **kwargs: object
    ) -> None:
        """`@*_door def name(...)` takes the door's signature and docstring."""
        if not any(DOOR.match(f"{decorator.value}(") for decorator in func.decorators):
            return
        door = _runtime(func.path)
        func.parameters = _parameters(door)
        func.returns = str(inspect.signature(door).return_annotation)
        func.docstring = _docstring(door, func, agent)

    def on_class_instance(
        self, *, cls: griffe.Class, agent: griffe.Visitor, **kwargs: object
    ) -> None:
        """`@with_mask_params class Name` takes its runtime docstring."""
        if not any(str(decorator.value) in DERIVED for decorator in cls.decorators):
            return
        runtime = _runtime(cls.path)
        cls.docstring = _docstring(runtime, cls, agent)
