"""reference/http-api.md: every path and method of the API, from the OpenAPI document it serves at
`/openapi.json` (tempoconf.api.openapi): parameters, request body, responses, and the schemas of
the bodies. The rollout request's objects link to reference/request.md instead of being repeated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from docs_gen.markdown import SchemaWriter, code, def_name, table

__all__ = ["http_api_page"]

_METHODS = ("get", "head", "put", "post", "patch", "delete")
_TAG_TITLES = {
    "distribution": "Distribution: what clients call",
    "admin": "Admin: schemas, versions, rollouts, freezes",
    "ofrep": "OFREP: OpenFeature's remote evaluation",
    "operations": "Operations: health, readiness, metrics",
}
_INTRO = """\
# The HTTP API

Every path and method the API serves, with its parameters, body and answers. This page is
written when the site is built from the OpenAPI document the API serves at `GET /openapi.json`
(version {version}). The rules behind the answers (resolution, long-polls, ETags, bundles,
errors) are in [the contract](../contract.md#distribution-api).

{description}
"""


def _anchor(name: str) -> str:
    return name.lower()


def _resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` to `#/components/...` replaced by what it names."""
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return node
    target: Any = document
    for part in ref.lstrip("#/").split("/"):
        target = target[part]
    return dict(target)


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method in _METHODS:
            if method in item:
                yield path, method, item[method]


def _authentication(document: dict[str, Any]) -> list[str]:
    """The section that says once what each token scheme is: an operation only names its own."""
    schemes = document.get("components", {}).get("securitySchemes", {})
    if not schemes:
        return []
    rows = [
        [code(name), scheme.get("description", "a bearer token")]
        for name, scheme in schemes.items()
    ]
    return [
        "## Authentication {#authentication}",
        "",
        "A token goes in `Authorization: Bearer <token>`. Each operation below names the kind "
        "it takes, and the role it needs under an access policy.",
        "",
        *table(["token", "what it is"], rows),
        "",
    ]


def _security(operation: dict[str, Any]) -> str:
    names = [name for entry in operation.get("security", []) for name in entry]
    if not names:
        return ""
    said = ", ".join(f"[{code(name)}](#authentication)" for name in names)
    role = operation.get("x-tempoconf-role")
    needs = f"; under an access policy, the {code(role)} role in the namespace" if role else ""
    return f"*Auth*: {said}{needs}."


class _Page:
    def __init__(self, document: dict[str, Any], request_schemas: set[str]) -> None:
        self.document = document
        self.schemas: dict[str, Any] = document.get("components", {}).get("schemas", {})
        self.request_schemas = request_schemas
        # The schemas request bodies name (as they validate); every other one is an answer's.
        pending = [
            def_name(ref)
            for _, _, operation in _operations(document)
            for ref in _refs(operation.get("requestBody", {}))
        ]
        self.bodies: set[str] = set()
        while pending:  # and the objects they hold, in turn
            name = pending.pop()
            if name not in self.bodies:
                self.bodies.add(name)
                pending += [def_name(ref) for ref in _refs(self.schemas.get(name, {}))]
        self.writer = SchemaWriter(self.schemas, self._link)
        self.lines: list[str] = []

    def _link(self, name: str) -> str:
        if name in self.request_schemas:
            return f"request.md#{_anchor(name)}"
        return f"#{_anchor(name)}"

    def _body(self, content: dict[str, Any]) -> str:
        said = []
        for media, body in content.items():
            schema = body.get("schema")
            said.append(f"{code(media)} {self.writer.type_of(schema)}" if schema else code(media))
        return "; ".join(said)

    def operation(self, path: str, method: str, operation: dict[str, Any]) -> None:
        title = f"`{method.upper()} {path}`"
        anchor = operation.get("operationId", f"{method}-{path}").lower()
        deprecated = " (deprecated)" if operation.get("deprecated") else ""
        self.lines += [f"### {title}{deprecated} {{#{anchor}}}", ""]
        said = [_sentence(operation.get("summary", "")), operation.get("description", "")]
        self.lines += [" ".join(" ".join(text.split()) for text in said if text), ""]
        auth = _security(operation)
        if auth:
            self.lines += [auth, ""]

        parameters = [_resolve(self.document, p) for p in operation.get("parameters", [])]
        if parameters:
            rows = [
                [
                    code(p["name"]),
                    p.get("in", ""),
                    self.writer.type_of(p.get("schema", {})),
                    self.writer.default(p.get("schema", {}), required=bool(p.get("required"))),
                    self.writer.constraints(p.get("schema", {})),
                    p.get("description", ""),
                ]
                for p in parameters
            ]
            header = ["parameter", "in", "type", "default", "constraints", "description"]
            self.lines += ["*Parameters*", "", *table(header, rows), ""]

        body = operation.get("requestBody")
        if body:
            needed = "required" if body.get("required") else "optional"
            self.lines += [f"*Body* ({needed}): {self._body(body.get('content', {}))}.", ""]

        rows = []
        for status, answer in operation.get("responses", {}).items():
            headers = ", ".join(code(name) for name in answer.get("headers", {}))
            rows.append(
                [
                    code(status),
                    answer.get("description", ""),
                    self._body(answer.get("content", {})),
                    headers,
                ]
            )
        self.lines += ["*Answers*", "", *table(["status", "what", "body", "headers"], rows), ""]

    def schema_sections(self, used: list[str]) -> None:
        self.lines += [
            "## Bodies {#bodies}",
            "",
            "The objects the operations above take and answer. The rollout request's objects are "
            "on [its own page](request.md).",
            "",
        ]
        for name in used:
            node = self.schemas[name]
            node_is_answer = name not in self.bodies
            self.lines += [f"### {name} {{#{_anchor(name)}}}", ""]
            said = [" ".join(node.get("description", "").split()), *self.writer.rules(node)]
            if any(said):
                self.lines += [" ".join(text for text in said if text), ""]
            if "properties" in node:
                self.lines += self.writer.fields(node, answer=node_is_answer)
            else:
                self.lines.append("A value of type " + self.writer.type_of(node) + ".")
            self.lines.append("")


def http_api_page(document: dict[str, Any], request_schemas: set[str]) -> str:
    """The page's Markdown, from the OpenAPI `document`; the schemas named in `request_schemas`
    (the rollout request's, documented on reference/request.md) are linked there."""
    info = document.get("info", {})
    page = _Page(document, request_schemas)
    page.lines.append(
        _INTRO.format(version=info.get("version", ""), description=info.get("description", ""))
    )
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, method, operation in _operations(document):
        tag = (operation.get("tags") or ["other"])[0]
        by_tag.setdefault(tag, []).append((path, method, operation))
    order = [tag for tag in _TAG_TITLES if tag in by_tag] + sorted(set(by_tag) - set(_TAG_TITLES))

    rows = [
        [f"[{code(method.upper() + ' ' + path)}](#{op.get('operationId', '').lower()})",
         op.get("summary", "")]
        for tag in order
        for path, method, op in by_tag[tag]
        if not op.get("deprecated")
    ]  # fmt: skip
    deprecated = sum(1 for _, _, op in _operations(document) if op.get("deprecated"))
    page.lines += ["## Operations", "", *table(["operation", "what"], rows), ""]
    page.lines += _authentication(document)
    if deprecated:
        page.lines += [
            f"Not listed here: {deprecated} deprecated forms, kept for older clients; each is "
            "marked *(deprecated)* where its section says what replaces it.",
            "",
        ]

    for tag in order:
        page.lines += [f"## {_TAG_TITLES.get(tag, tag)} {{#tag-{tag}}}", ""]
        for path, method, operation in by_tag[tag]:
            page.operation(path, method, operation)

    # Every schema an operation names, and those they name in turn, except the request's.
    used: list[str] = []
    pending = [
        def_name(ref)
        for _, _, operation in _operations(document)
        for ref in _refs(operation)
        if ref.startswith("#/components/schemas/")
    ]
    while pending:
        name = pending.pop(0)
        if name in used or name in request_schemas:
            continue
        used.append(name)
        pending += [def_name(ref) for ref in _refs(page.schemas[name])]
    page.schema_sections(used)
    return "\n".join(page.lines)


def _sentence(text: str) -> str:
    text = text.strip()
    return text + "." if text and text[-1] not in ".!?)" else text


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)
