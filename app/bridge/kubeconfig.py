"""What is wrong with a kubeconfig file, in words a user can act on.

The `kubernetes` client loads any YAML and fails deep inside on a file of the wrong shape
(`'str' object does not support item assignment` for a file that is one line of text).
This reads the file first, as YAML nodes (so a problem has a line number), and checks
the shape the client reads: a mapping whose `clusters`, `contexts` and `users` are lists
of mappings, each with a `name` (issue 29 item 8).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# What each list holds: its items' own mapping key (kubectl's kubeconfig format).
_LISTS = {"clusters": "cluster", "contexts": "context", "users": "user"}
_SHAPE = "a kubeconfig is a YAML mapping with clusters, users, contexts and current-context (`kubectl config view --raw` prints one)"


def _what(node: Node) -> str:
    """A node's kind in a few words: "a list", "a mapping", "a string", "a number"."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    tag = node.tag.rsplit(":", 1)[-1]
    return {"str": "a string", "int": "a number", "float": "a number", "bool": "a boolean", "null": "empty"}.get(tag, f"a {tag}")


def _line(node: Node) -> str:
    return f"line {node.start_mark.line + 1}"


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag.endswith(":null")


def _entries(node: MappingNode) -> dict[str, Node]:
    return {str(key.value): value for key, value in node.value if isinstance(key, ScalarNode)}


def shape_problem(text: str) -> str | None:
    """What makes `text` not a kubeconfig the client can load, or None. The answer is
    the end of a sentence that starts with "the kubeconfig FILE"."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return f"is not valid YAML{line}: {problem}"
    if root is None or _is_null(root):
        return f"is empty: {_SHAPE}"
    if not isinstance(root, MappingNode):
        return f"is not a kubeconfig: its YAML is {_what(root)} ({_line(root)}), not a mapping; {_SHAPE}"
    top = _entries(root)
    for name, inner in _LISTS.items():
        node = top.get(name)
        if node is None or _is_null(node):
            continue
        if not isinstance(node, SequenceNode):
            return f"is not a kubeconfig: `{name}` ({_line(node)}) is {_what(node)}, not a list of {{name, {inner}}} mappings; {_SHAPE}"
        for index, item in enumerate(node.value):
            at = f"`{name}[{index}]` ({_line(item)})"
            if not isinstance(item, MappingNode):
                return f"is not a kubeconfig: {at} is {_what(item)}, not a mapping with `name` and `{inner}`; {_SHAPE}"
            fields = _entries(item)
            if "name" not in fields or not isinstance(fields["name"], ScalarNode) or _is_null(fields["name"]):
                return f"is not a kubeconfig: {at} has no `name`; {_SHAPE}"
            body = fields.get(inner)
            if body is not None and not _is_null(body) and not isinstance(body, MappingNode):
                return f"is not a kubeconfig: `{name}[{index}].{inner}` ({_line(body)}) is {_what(body)}, not a mapping; {_SHAPE}"
    current = top.get("current-context")
    if current is not None and not isinstance(current, ScalarNode):
        return f"is not a kubeconfig: `current-context` ({_line(current)}) is {_what(current)}, not a context's name; {_SHAPE}"
    return None


def file_problem(path: Path) -> str | None:
    """`shape_problem` of a file, or why it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return f"is not text (not UTF-8): {_SHAPE}"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return shape_problem(text)
