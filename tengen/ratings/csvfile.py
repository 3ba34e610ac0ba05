"""Results of outside tournaments as CSV: columns game_id, black, white, winner (B, W or draw).

Other columns are ignored. Every row is checked before anything is returned, and an error names
the file and line, so a bad file imports nothing.
"""
from __future__ import annotations

import csv
from pathlib import Path

from tengen.ratings.records import GameReport, InvalidRequest, RatingsError, parse_result, validate_game

COLUMNS = ("game_id", "black", "white", "winner")


def read_games(path: Path, source: str = "import") -> list[GameReport]:
    try:
        handle = open(path, newline="", encoding="utf-8")
    except OSError as error:
        raise InvalidRequest(f"{path}: cannot read: {error.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        try:
            header = [name.strip() for name in reader.fieldnames or []]
        except (csv.Error, UnicodeDecodeError) as error:
            raise InvalidRequest(f"{path} line 1: {error}") from None
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise InvalidRequest(
                f"{path} line 1: missing column(s) {', '.join(missing)}; expected a header with "
                f"{','.join(COLUMNS)}"
            )
        reader.fieldnames = header
        games: list[GameReport] = []
        first_line: dict[str, tuple[int, GameReport]] = {}
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except (csv.Error, UnicodeDecodeError) as error:
                raise InvalidRequest(f"{path} line {reader.line_num}: {error}") from None
            line = reader.line_num
            if all(not (v or "").strip() for k, v in row.items() if k is not None):
                continue  # blank line
            values = {c: (row.get(c) or "").strip() for c in COLUMNS}
            try:
                if not values["winner"]:
                    raise InvalidRequest("winner is missing: expected B, W or draw")
                result = parse_result(values["winner"])
                game = GameReport(values["game_id"], values["black"], values["white"], result, source)
                validate_game(game)
            except RatingsError as error:
                raise InvalidRequest(f"{path} line {line}: {error}") from None
            seen = first_line.get(game.game_id)
            if seen is not None:
                if seen[1] != game:
                    raise InvalidRequest(
                        f"{path} line {line}: game id {game.game_id!r} already used on line {seen[0]} "
                        "with different content"
                    )
                continue
            first_line[game.game_id] = (line, game)
            games.append(game)
    if not games:
        raise InvalidRequest(f"{path}: no games (expected a header and rows {','.join(COLUMNS)})")
    return games
