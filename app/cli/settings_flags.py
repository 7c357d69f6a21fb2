"""Command-line flags for settings declared in a settings Struct (`app.settings.describe`)."""

from __future__ import annotations

import argparse
import typing
from typing import Any, Literal

from app.settings import SettingInfo


def settings_flags(infos: list[SettingInfo], names: list[str], title: str = "settings") -> argparse.ArgumentParser:
    """A parent parser with one flag per named setting; `None` means 'not given', so the
    environment and then the default apply (see `app.settings.load_struct`)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group(f"{title} (flag > environment variable > default)")
    for info in infos:
        if info.name not in names:
            continue
        kwargs: dict[str, Any] = {"dest": info.name, "default": None}
        if typing.get_origin(info.type) is Literal:
            kwargs["choices"] = list(typing.get_args(info.type))
        elif info.type in (int, float):
            kwargs["type"] = info.type
        metavar = info.name.upper() if "choices" not in kwargs else None
        group.add_argument(info.flag, metavar=metavar, help=f"{info.doc} [{info.env}, default {info.default!r}]", **kwargs)
    return parent
