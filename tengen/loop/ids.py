"""What a name from outside may be: game ids, player names and model names travel through Kafka
records, the window's id list, file names, log lines, HTML pages and the ratings database, so each
is 1..MAX_ID_LENGTH characters of ASCII letters, digits and `. _ - : + @`, starting with a letter
or digit (no control character, space, quote, path separator, hidden file or option-like name).
Whatever reads one escapes it anyway where it lands (HTML, SGF, SQL parameters)."""
from __future__ import annotations

import re

MAX_ID_LENGTH = 128
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@-]*")


def id_problem(text: object) -> str | None:
    """Why `text` is not a safe id, in words, or None when it is one."""
    if not isinstance(text, str) or not text:
        return "is missing"
    if len(text) > MAX_ID_LENGTH:
        return f"is {len(text)} characters long, over {MAX_ID_LENGTH}"
    if not SAFE_ID.fullmatch(text):
        bad = next((c for c in text if not re.fullmatch(r"[A-Za-z0-9._:+@-]", c)), text[0])
        return (f"{text!r} holds {bad!r}: only ASCII letters, digits and . _ - : + @ are allowed, "
                "starting with a letter or digit")
    return None
