"""Rule files: a named, versioned rule set as TOML or JSON (SPEC R10).

Every field of `app.core.base.rules.Rules` may be given; a field given replaces the default
wholesale (a list or table is not merged). `faultline rules show` prints the full
default set to start from; its output is a rule file as it stands (its `rules_version`
is ignored: the version is computed from the settings).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from app.core.base.rules import DEFAULT_RULES, Rules


class RuleFileError(ValueError):
    pass


def load_rules(path: Path | None) -> Rules:
    """The rules in `path` (the built-in default when None); errors name the field."""
    if path is None:
        return DEFAULT_RULES
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise RuleFileError(f"rule file {path}: cannot be read ({exc.strerror}); give the path of a .toml or .json rule file") from None
    decode = msgspec.json.decode if path.suffix == ".json" else msgspec.toml.decode
    try:
        document = decode(content)
        if isinstance(document, dict) and "rules_version" in document:
            # What `rules show` prints starts with the set's version: computed from the
            # settings (R10.1), so a file's own is ignored, edited settings or not.
            del document["rules_version"]
            decode, content = msgspec.json.decode, msgspec.json.encode(document)
        rules = decode(content, type=Rules)
    except msgspec.ValidationError as exc:
        raise RuleFileError(f"rule file {path}: {exc}; `faultline rules show` lists every field with its default") from None
    except msgspec.DecodeError as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise RuleFileError(f"rule file {path}: not valid {kind} ({exc})") from None
    both = sorted(rules.xid.user & rules.xid.critical)
    if both:
        codes = ", ".join(f"Xid {code}" for code in both)
        raise RuleFileError(
            f"rule file {path}: xid.user and xid.critical both list {codes}: an Xid is the workload's (user) or the "
            "device's (critical), not both; remove it from one of the two lists"
        )
    return rules


def rules_document(rules: Rules) -> dict:
    """The rule set as plain data, with its version, for `faultline rules show`."""
    body = msgspec.to_builtins(rules, str_keys=True, order="deterministic")
    return {"rules_version": rules.version, **body}
