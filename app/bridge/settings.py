"""The bridge's own settings, declared once (the Kafka ones — bootstrap, topic prefix,
replication, log level — are `app.settings.Settings`).

Each field is one setting: environment variable `FAULTLINE_<NAME>`, flag
`--<name-with-dashes>`; a flag overrides the environment, which overrides the default.
`load()` says which setting is wrong and how to fix it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from app.bridge.resources import KINDS_BY_NAME
from app.settings import SettingInfo, SettingsError, load_struct
from app.settings import describe as describe_settings

_NAMESPACE_LIST = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(,[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"
_KIND_LIST = r"^([A-Za-z]+(,[A-Za-z]+)*)?$"


class BridgeSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    cluster: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=100,
            pattern=r"^[A-Za-z0-9._-]*$",
            description="name of the watched cluster, written in every record's envelope and position key (required)",
        ),
    ] = ""
    namespaces: Annotated[
        str,
        msgspec.Meta(pattern=_NAMESPACE_LIST, description="comma-separated namespaces to watch; '' watches all namespaces"),
    ] = ""
    kinds: Annotated[
        str,
        msgspec.Meta(
            pattern=_KIND_LIST,
            description=f"comma-separated kinds to watch; '' for all: {','.join(KINDS_BY_NAME)}",
        ),
    ] = ""
    kubeconfig: Annotated[
        str,
        msgspec.Meta(
            description="kubeconfig file; '' uses the in-cluster config inside a pod, else $KUBECONFIG or ~/.kube/config"
        ),
    ] = ""
    context: Annotated[str, msgspec.Meta(description="kubeconfig context; '' for the current context")] = ""
    page_size: Annotated[
        int, msgspec.Meta(ge=1, le=10_000, description="objects per list page (limit/continue)")
    ] = 500
    watch_timeout: Annotated[
        int,
        msgspec.Meta(
            ge=1, le=3600, description="seconds a watch lasts before the server ends it (timeoutSeconds); it is then resumed"
        ),
    ] = 300
    backoff_initial: Annotated[
        float, msgspec.Meta(gt=0, le=60, description="seconds before the first retry after a failed list or watch")
    ] = 0.5
    backoff_max: Annotated[
        float, msgspec.Meta(gt=0, le=3600, description="cap of the retry delay, which doubles on each failure in a row")
    ] = 30.0
    give_up_after: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            description="seconds a watch may keep failing with errors that can heal (unreachable, 5xx, 429) before the bridge "
            "exits; 0 retries forever. Errors that cannot heal (unknown host, certificate rejected, 401) are fatal at once",
        ),
    ] = 300.0
    crd_recheck: Annotated[
        float, msgspec.Meta(gt=0, description="seconds between checks for a kind whose CRD is not installed")
    ] = 60.0
    checkpoint_interval: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="seconds between position checkpoints (each waits for the records before it to be acknowledged)",
        ),
    ] = 1.0
    progress_interval: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            description="seconds between progress records (BOOKMARK) on every partition of each source topic; each follows "
            "a flush that covers every change it speaks for",
        ),
    ] = 1.0
    heartbeat_file: Annotated[
        str, msgspec.Meta(description="file touched every few seconds while the bridge runs (a liveness probe reads it); '' for none")
    ] = ""

    def namespace_list(self) -> list[str]:
        return [n for n in self.namespaces.split(",") if n]

    def kind_list(self) -> list[str]:
        return [k for k in self.kinds.split(",") if k]


def describe() -> list[SettingInfo]:
    """Every bridge setting with its env var, flag, default and doc."""
    return describe_settings(BridgeSettings)


def load(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> BridgeSettings:
    """Defaults, then FAULTLINE_* from `env` (default: os.environ), then `overrides`
    (flags; None means 'not given'). Raises SettingsError naming the bad setting."""
    settings = load_struct(BridgeSettings, overrides, env)
    infos = {info.name: info for info in describe()}
    if not settings.cluster:  # msgspec does not check a default against its constraints
        info = infos["cluster"]
        raise SettingsError(f"setting cluster is required: give {info.flag} NAME or set {info.env} ({info.doc})")
    unknown = [k for k in settings.kind_list() if k not in KINDS_BY_NAME]
    if unknown:
        info = infos["kinds"]
        raise SettingsError(
            f"setting kinds names unknown kind(s) {', '.join(unknown)}: expected some of {', '.join(KINDS_BY_NAME)}; "
            f"fix {info.flag} or {info.env}"
        )
    if settings.backoff_max < settings.backoff_initial:
        raise SettingsError(
            f"setting backoff_max = {settings.backoff_max} is below backoff_initial = {settings.backoff_initial}: "
            "raise --backoff-max (FAULTLINE_BACKOFF_MAX) or lower --backoff-initial (FAULTLINE_BACKOFF_INITIAL)"
        )
    return settings
