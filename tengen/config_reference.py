"""The settings reference of docs/configuration.md, generated from tengen/config.py so it cannot drift.

One table per section of `Config`: every key with its environment variable, its default, its
value in each preset and the first sentence of the comment beside it in config.py.
`tests/test_config.py` checks that the page holds what `reference()` writes now.

    python -m tengen.config_reference > docs/configuration.md     # regenerate after a change
"""
from __future__ import annotations

import dataclasses
import io
import re
import tokenize
from pathlib import Path

from tengen.config import PRESETS, Config, load_config

SOURCE = Path(__file__).resolve().parent / "config.py"
INTRO = """# Configuration

Every service and command reads one preset (`--preset tiny|cpu|cpu7|paper` or a YAML path; without
the flag `$TENGEN_PRESET`, else cpu) and then environment overrides: `TENGEN_<SECTION>__<KEY>` (for
example `TENGEN_TRAINER__BATCH_SIZE=128`) and the short names `TENGEN_DATA_DIR`,
`TENGEN_DATABASE_URL`, `TENGEN_RATINGS_TOKEN`, `TENGEN_RATINGS_URL`, `TENGEN_KAFKA_BOOTSTRAP` and
`TENGEN_TRITON_URL`. Unknown keys and bad values stop the service with the key named; a retired
variable name stops it with the name to use instead. That is the only configuration
(`tengen/config.py`): a flag left out takes the preset's value. The presets are the YAML files in
`tengen/configs/`: `tiny` (the tests, minutes), `cpu` (9x9 on one 2-core box, the default of
`make run`), `cpu7` (7x7 on the same box) and `paper` (KataGo's values, GPUs); their comments say
why each value is what it is, and [results.md](results.md) holds the measurements behind them.

The tables below are generated from `tengen/config.py` (`python -m tengen.config_reference >
docs/configuration.md`); a test fails when they are out of date. Secrets (`ratings.token`,
`ratings.database_url`) come from the environment only.
"""


def field_comments(source: str) -> dict[tuple[str, str], str]:
    """(class name, field name) -> the comment on the field's line, else the block just above it."""
    comments: dict[tuple[str, str], str] = {}
    block: list[str] = []
    cls = None
    lines = source.splitlines()
    inline = {tok.start[0]: tok.string.lstrip("# ").strip()
              for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    for number, line in enumerate(lines, start=1):
        if match := re.match(r"class (\w+)", line):
            cls, block = match.group(1), []
        elif line.strip().startswith("#"):
            block.append(line.strip().lstrip("# ").strip())
        elif cls and (match := re.match(r"    (\w+): ", line)):
            text = inline.get(number) if not line.strip().startswith("#") and "#" in line else None
            comments[(cls, match.group(1))] = text or " ".join(block)
            block = []
        else:
            block = []
    return comments


ABBREVIATIONS = ("App", "Fig", "e.g", "i.e", "vs", "cf")


def first_sentence(text: str, limit: int = 160) -> str:
    """Up to the first full stop outside parentheses (abbreviations skipped), at most `limit` chars."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "." and depth == 0 and (i + 1 == len(text) or text[i + 1] == " "):
            if not text[:i].endswith(ABBREVIATIONS):
                text = text[:i]
                break
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return text.replace("|", "\\|")


def shown(value: object) -> str:
    if isinstance(value, str):
        return f"`{value}`" if value else "(empty)"
    return f"`{value}`".replace("|", "\\|")


def reference() -> str:
    comments = field_comments(SOURCE.read_text())
    presets = {name: load_config(name, env={}) for name in PRESETS}
    out = [INTRO]
    for section in dataclasses.fields(Config):
        if not (isinstance(section.default_factory, type) and dataclasses.is_dataclass(section.default_factory)):
            continue
        cls = section.default_factory
        out.append(f"\n## {section.name}\n\n| key | default | {' | '.join(PRESETS)} | what it is |\n"
                   f"| --- | --- | {' | '.join('---' for _ in PRESETS)} | --- |\n")
        for f in dataclasses.fields(cls):
            default = getattr(cls(), f.name)
            values = [getattr(getattr(presets[p], section.name), f.name) for p in PRESETS]
            cells = ["=" if v == default else shown(v) for v in values]
            note = first_sentence(comments.get((cls.__name__, f.name), ""))
            out.append(f"| `{section.name}.{f.name}` | {shown(default)} | {' | '.join(cells)} | {note} |\n")
    out.append("\n`=`: the preset keeps the default. Environment: `TENGEN_<SECTION>__<KEY>` in capitals, "
               "e.g. `TENGEN_SEARCH__FULL_VISITS`.\n")
    return "".join(out)


if __name__ == "__main__":
    print(reference(), end="")
