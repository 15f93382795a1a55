"""Sphinx extension: option tables generated from the code that validates the options.

``{reactive-options} source`` renders every option of ``format("reactive")``;
``{reactive-options} mqtt`` (or ``range``, ``websocket``, ``rsocket``) a built-in
publisher's own options. Both come from the declarative definitions the code parses the
options with, so a default or an accepted range cannot differ between code and docs.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive


def option_specs(kind: str) -> tuple[Any, ...]:
    """The option definitions of the source (``source``) or of a built-in publisher."""
    from pyspark_reactive.source import options as source_options

    if kind == "source":
        return tuple(source_options.SOURCE_OPTION_SPECS)
    if kind not in source_options.BUILTIN_PUBLISHERS:
        raise ValueError(f"reactive-options: unknown kind {kind!r}; accepted: source, "
                         + ", ".join(sorted(source_options.BUILTIN_PUBLISHERS)))
    factory = source_options.resolve_factory(kind)
    specs = getattr(factory, "option_specs", None)
    if specs is None:
        raise ValueError(f"reactive-options: the built-in publisher {kind!r} declares no "
                         "option_specs")
    return tuple(specs)


def _paragraph(text: str, literal: bool = False,
               inline: list[nodes.Node] | None = None) -> nodes.Node:
    entry = nodes.entry()
    para = nodes.paragraph()
    if inline is not None:
        para.extend(inline)
    else:
        para += nodes.literal(text=text) if literal else nodes.Text(text)
    entry += para
    return entry


class ReactiveOptions(Directive):
    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        try:
            specs = option_specs(self.arguments[0])
        except Exception as error:  # shown as a build error, which -W makes fatal
            raise self.error(str(error)) from None
        headers = ("Option", "Required", "Default", "Accepted", "Query type", "Meaning")
        table = nodes.table(classes=["reactive-options", "colwidths-given"])
        group = nodes.tgroup(cols=len(headers))
        table += group
        for width in (20, 8, 12, 16, 11, 33):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        row = nodes.row()
        for header in headers:
            row += _paragraph(header)
        head += row
        group += head
        body = nodes.tbody()
        for spec in specs:
            row = nodes.row(ids=[f"option-{self.arguments[0]}-{spec.name.lower()}"])
            row += _paragraph(spec.name, literal=True)
            row += _paragraph("yes" if spec.required else "no")
            row += _paragraph(spec.default_text)
            row += _paragraph(spec.accepted_text)
            row += _paragraph(spec.queries)
            # The meaning is Markdown (backticked names): parsed as the page's inline text.
            inline, messages = self.state.inline_text(spec.meaning, self.lineno)
            row += _paragraph(spec.meaning, inline=inline)
            if messages:
                raise self.error(f"option {spec.name}: its meaning does not parse: "
                                 f"{messages}")
            body += row
        group += body
        return [table]


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("reactive-options", ReactiveOptions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
