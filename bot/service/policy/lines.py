"""The line of the policy file a problem is on, so that `approval-bot check` can say
`policy.yml:12: tools.3.when.args.replicas: ...`.

PyYAML's composed nodes keep their marks; a validation error's location (mapping keys and list
indexes, as pydantic reports them) is followed through them as far as it goes.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml


def nodes_of(text: str) -> yaml.Node | None:
    """The YAML's node tree (None when it cannot be composed: the caller shows no line)."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def line_of(root: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """The 1-based line of the deepest node `loc` reaches: a key's own line for a mapping
    entry (or for pydantic's `[key]` errors), an item's for a list index."""
    if root is None:
        return None
    node = root
    line = root.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            entry = next(
                ((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)
                 and k.value == str(part)),
                None,
            )  # fmt: skip
            if entry is None:
                break
            key, node = entry
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
