"""The logging of `pdctl serve`: uvicorn's own configuration, with secrets masked.

uvicorn logs every request line with its query string, and a websocket client may send its
token as `?token=`: the value of such a parameter is replaced by `***` before any handler
writes the line.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

MASK = "***"
SECRET_QUERY = re.compile(
    r"(?i)([?&](?:token|access_token|api_key|key|secret|password)=)"
    r"[^&#\s\"]*"
)


def mask_query(text: str) -> str:
    return SECRET_QUERY.sub(lambda m: m[1] + MASK, text)


class MaskSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = mask_query(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(mask_query(a) if isinstance(a, str) else a for a in record.args)
        return True


def config() -> dict[str, Any]:
    """uvicorn's LOGGING_CONFIG with MaskSecrets on every handler."""
    from uvicorn.config import LOGGING_CONFIG

    conf = copy.deepcopy(LOGGING_CONFIG)
    conf.setdefault("filters", {})["mask_secrets"] = {"()": MaskSecrets}
    for handler in conf["handlers"].values():
        handler.setdefault("filters", []).append("mask_secrets")
    return conf
