"""Command-line flags for settings declared in a settings Struct (`app.settings.describe`)."""

from __future__ import annotations

import argparse
import typing
from typing import Any, Literal

from app.settings import SECRETS, SettingInfo


def add_settings_flags(group: Any, infos: list[SettingInfo], names: list[str]) -> None:
    """One flag per named setting on `group` (a parser or argument group); `None` means
    'not given', so the environment and then the default apply (`app.settings.load_struct`).
    Secrets get no flag: a flag would show them in the process list."""
    for info in infos:
        if info.name not in names or info.name in SECRETS:
            continue
        kwargs: dict[str, Any] = {"dest": info.name, "default": None}
        if typing.get_origin(info.type) is Literal:
            kwargs["choices"] = list(typing.get_args(info.type))
        elif info.type in (int, float):
            kwargs["type"] = info.type
        elif info.type is bool:
            kwargs["choices"] = ["true", "false"]
        metavar = info.name.upper() if "choices" not in kwargs else None
        group.add_argument(info.flag, metavar=metavar, help=f"{info.doc} [{info.env}, default {info.default!r}]", **kwargs)


def settings_flags(infos: list[SettingInfo], names: list[str], title: str = "settings") -> argparse.ArgumentParser:
    """A parent parser with one flag per named setting."""
    parent = argparse.ArgumentParser(add_help=False)
    add_settings_flags(parent.add_argument_group(f"{title} (flag > environment variable > default)"), infos, names)
    return parent
