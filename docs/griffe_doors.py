"""A griffe extension (mkdocs.yml loads it): the front doors read as the functions they are.

`scaled_dot_product_attention = forward_door(attention_of)` reads to griffe's static analysis as
an attribute with no docstring; each such name is imported and shown as a function with the
door's own signature and docstring (scratch.core.front_doors writes both).
"""

import inspect
import re

import griffe

DOOR = re.compile(r"^\w*_door\(")  # forward_door(...), flex_backward_door(...), ...


def _parameter(p: inspect.Parameter) -> griffe.Parameter:
    """One parameter of an inspect signature as griffe's."""
    default = None if p.default is inspect.Parameter.empty else repr(p.default)
    annotation = None if p.annotation is inspect.Parameter.empty else str(p.annotation)
    kind = griffe.ParameterKind(p.kind.description)
    return griffe.Parameter(p.name, annotation=annotation, kind=kind, default=default)


class FrontDoors(griffe.Extension):
    """Replace every `name = *_door(impl)` attribute with the function it makes."""

    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs: object) -> None:
        """An attribute made by a door becomes a Function with its signature and docstring."""
        if attr.value is None or not DOOR.match(str(attr.value)):
            return
        door = griffe.dynamic_import(attr.path)
        signature = inspect.signature(door)
        parameters = griffe.Parameters(*map(_parameter, signature.parameters.values()))
        function = griffe.Function(
            attr.name,
            lineno=attr.lineno,
            endlineno=attr.endlineno,
            parameters=parameters,
            returns=str(signature.return_annotation),
            docstring=griffe.Docstring(inspect.getdoc(door), lineno=attr.lineno),
        )
        attr.parent.set_member(attr.name, function)
