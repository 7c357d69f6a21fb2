"""The mark's own settings, declared once (SPEC R18; docs/mark.md). `faultline mark` also
takes the Kafka ones (`app.settings.Settings`: connection, security, `fetch_wait_ms`,
`log_level`) and the API server's (`app.bridge.settings.BridgeSettings`: `cluster`,
`kubeconfig`, `context` and the retry settings); `faultline run --mark` takes the ones
below that do not concern Kafka.

Each field is one setting: environment variable `FAULTLINE_<NAME>`, flag
`--<name-with-dashes>`; a flag overrides the environment, which overrides the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from app.core.actions.marking import GPU_FAULT_CONDITION
from app.settings import SettingInfo, load_struct
from app.settings import describe as describe_settings

# A pod condition type the API server takes for a custom condition: a qualified name,
# `[prefix/]name` (kubernetes apimachinery pkg/util/validation IsQualifiedName): the prefix a
# DNS subdomain, the name at most 63 of [A-Za-z0-9._-], starting and ending alphanumeric.
_QUALIFIED_NAME = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"


class MarkSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    mark_condition_type: Annotated[
        str,
        msgspec.Meta(
            pattern=_QUALIFIED_NAME,
            max_length=316,
            description="the pod condition a trusted critical GPU fault adds (SPEC R18.1); a Job's podFailurePolicy "
            "matches it by this type. Change the admission policy of ops/k8s/mark with it",
        ),
    ] = GPU_FAULT_CONDITION
    mark_group: Annotated[
        str,
        msgspec.Meta(
            pattern=r"^[A-Za-z0-9._-]+$",
            max_length=100,
            description="consumer group of `faultline mark` after the topic prefix: its committed offsets say which "
            "faults were marked or skipped",
        ),
    ] = "faultline-mark"
    mark_concurrency: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=256,
            description="pods read and patched at once (one pod's faults always in order, one at a time)",
        ),
    ] = 8
    mark_metrics_port: Annotated[
        int, msgspec.Meta(ge=0, le=65535, description="port of `faultline mark`'s /metrics; 0 turns it off")
    ] = 6067
    mark_metrics_host: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            description="address /metrics listens on: 127.0.0.1 by default, 0.0.0.0 in a pod (reached through its "
            "NetworkPolicy)",
        ),
    ] = "127.0.0.1"
    mark_remembered: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            le=1_000_000,
            description="pods remembered as marked or ended, so that their further faults are skipped without asking "
            "the API server again (the oldest forgotten first; 0: ask every time; ~180 B each: the most, 1,000,000, "
            "is ~180 MB, within the shipped Deployment's 512Mi)",
        ),
    ] = 100_000


# Settings `faultline run --mark` takes: it reads no Kafka, serves nothing, and marks each
# fault as the pipeline emits it (one at a time).
EMBEDDED = ["mark_condition_type", "mark_remembered"]


def describe() -> list[SettingInfo]:
    """Every mark setting with its env var, flag, default and doc."""
    return describe_settings(MarkSettings)


def load(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> MarkSettings:
    """Defaults, then FAULTLINE_* from `env` (default: os.environ), then `overrides`
    (flags; None means 'not given'). Raises SettingsError naming the bad setting."""
    return load_struct(MarkSettings, overrides, env)
