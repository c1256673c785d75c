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

import griffe

DOOR = re.compile(r"^(\w+_)?door\(")  # door(...), forward_door(...), decode_door(...), ...
DERIVED = {"with_mask_params"}  # class decorators that write the class's docstring


def _parameter(p: inspect.Parameter) -> griffe.Parameter:
    """One parameter of an inspect signature as griffe's."""
    default = None if p.default is inspect.Parameter.empty else repr(p.default)
    annotation = None if p.annotation is inspect.Parameter.empty else str(p.annotation)
    kind = griffe.ParameterKind(p.kind.description)
    return griffe.Parameter(p.name, annotation=annotation, kind=kind, default=default)


def _parameters(door: object) -> griffe.Parameters:
    """The door's signature as griffe's parameters."""
    return griffe.Parameters(*map(_parameter, inspect.signature(door).parameters.values()))


class FrontDoors(griffe.Extension):
    """Show every door-made function with the door's signature and docstring."""

    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs: object) -> None:
        """`name = *_door(impl)` becomes a Function."""
        if attr.value is None or not DOOR.match(str(attr.value)):
            return
        door = griffe.dynamic_import(attr.path)
        function = griffe.Function(
            attr.name,
            lineno=attr.lineno,
            endlineno=attr.endlineno,
            parameters=_parameters(door),
            returns=str(inspect.signature(door).return_annotation),
            docstring=griffe.Docstring(inspect.getdoc(door), lineno=attr.lineno),
        )
        attr.parent.set_member(attr.name, function)

    def on_function_instance(self, *, func: griffe.Function, **kwargs: object) -> None:
        """`@*_door def name(...)` takes the door's signature and docstring."""
        if not any(DOOR.match(f"{decorator.value}(") for decorator in func.decorators):
            return
        door = griffe.dynamic_import(func.path)
        func.parameters = _parameters(door)
        func.docstring = griffe.Docstring(inspect.getdoc(door), lineno=func.lineno, parent=func)

    def on_class_instance(self, *, cls: griffe.Class, **kwargs: object) -> None:
        """`@with_mask_params class Name` takes its runtime docstring."""
        if not any(str(decorator.value) in DERIVED for decorator in cls.decorators):
            return
        runtime = griffe.dynamic_import(cls.path)
        cls.docstring = griffe.Docstring(inspect.getdoc(runtime), lineno=cls.lineno, parent=cls)
