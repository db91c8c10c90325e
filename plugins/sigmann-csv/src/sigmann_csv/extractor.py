"""The CSV extractor: chosen columns of a delimited text file into named float64 sections, read in chunks of
records (so a block cache can be built from a file larger than memory).

A section is a column spec: an index, an inclusive range (``"0-3"``), a comma list of both (``"0-3,6"``) or a
list of indices and strings. Categorical columns get a value mapping: a list (values map to their positions) or
a table (value -> number). A row with another number of columns than the first, or a value that is neither a
number nor mapped, is an error naming the file and line.
"""

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from sigma_core import ConfigError, DataError, accepts, check_readable

DEFAULT_SECTIONS = {"inputs": "0--2", "targets": -1}  # every column but the last, then the last


def parse_columns(spec: int | str | Sequence[int | str], width: int) -> list[int]:
    """Column indices for ``spec`` in a row of ``width`` columns; negative indices count from the end."""
    parts: list[int | str] = [spec] if isinstance(spec, (int, str)) else list(spec)
    columns: list[int] = []
    for part in parts:
        pieces = [part] if isinstance(part, int) else [p.strip() for p in str(part).split(",") if p.strip()]
        for piece in pieces:
            try:
                if isinstance(piece, int) or piece.lstrip("-").isdigit():
                    bounds = (int(piece), int(piece))
                else:  # "a-b", where b may be negative: "0--2"
                    first, _, last = piece[1:].partition("-")
                    bounds = (int(piece[0] + first), int(last))
            except ValueError:
                raise DataError(f"bad column spec {piece!r}: use an index, 'first-last' or a list of them") from None
            low, high = (b + width if b < 0 else b for b in bounds)
            if not 0 <= low <= high < width:
                raise DataError(f"column spec {piece!r} is outside the {width} columns of the file")
            columns.extend(range(low, high + 1))
    return columns


def _mapping_table(mappings: Mapping | None) -> dict[int, dict[str, float]]:
    """``{column: {value: number}}`` from a config mapping whose keys may be strings (TOML)."""
    table = {}
    for column, values in (mappings or {}).items():
        if not (accepts("int", column) or isinstance(column, str) and column.lstrip("-").isdigit()):
            raise ConfigError(f"data.mappings: the key {column!r} is not a column index (an integer: "
                              f"mappings = {{ 4 = [\"setosa\", \"versicolor\"] }})")
        pairs = values.items() if isinstance(values, Mapping) else ((value, i) for i, value in enumerate(values))
        table[int(column)] = {str(key): float(number) for key, number in pairs}
    return table


def read_csv(path, sections: Mapping[str, int | str | Sequence] | None = None, *, delimiter: str = ",",
             skip_header: int = 0, mappings: Mapping | None = None, chunk_records: int = 65536,
             allow_non_finite: bool = False) -> Iterator[dict[str, np.ndarray]]:
    """Yield ``{section: float64 array (n, columns)}`` chunks of at most ``chunk_records`` records.

    ``sections`` defaults to every column but the last as ``inputs`` and the last as ``targets``; blank lines
    are ignored. A ``nan`` or ``inf`` cell is an error naming its line unless ``allow_non_finite``.
    """
    path, sections = Path(path), DEFAULT_SECTIONS if sections is None else sections
    if len(delimiter) != 1:  # the type of each argument is checked by argument_rules below
        raise ConfigError(f"data.delimiter: expected one character, got {delimiter!r}")
    mapping = _mapping_table(mappings)
    check_readable(path, DataError, "CSV file")
    try:
        file = open(path, newline="", encoding="utf-8")
    except OSError as error:
        raise DataError(f"cannot read CSV file {path}: {error.strerror or error}") from None
    with file:
        reader = csv.reader(file, delimiter=delimiter)
        columns = None  # section -> positions in ``used``, the file columns any section reads (only these are parsed)
        rows: list[list[float]] = []
        try:
            for row in reader:
                line = reader.line_num
                if line <= skip_header or not any(cell.strip() for cell in row):
                    continue
                if columns is None:
                    width, first_line = len(row), line
                    try:
                        wanted = {name: parse_columns(spec, width) for name, spec in sections.items()}
                    except DataError as error:
                        raise DataError(f"{path} line {line}: {error}") from None
                    used = sorted({c for cols in wanted.values() for c in cols})
                    columns = {name: [used.index(c) for c in cols] for name, cols in wanted.items()}
                    for column in mapping:
                        if not 0 <= column < width:
                            raise DataError(f"{path}: value mapping for column {column}, but rows have {width} columns")
                elif len(row) != width:
                    raise DataError(f"{path} line {line}: {len(row)} columns, expected {width} "
                                    f"(as on line {first_line})")
                rows.append([_value(row[c], c, mapping, path, line, allow_non_finite) for c in used])
                if len(rows) == chunk_records:
                    yield _chunk(rows, columns)
                    rows = []
        except UnicodeDecodeError as error:  # decoded ahead in blocks, so no line number
            raise DataError(f"CSV file {path} is not UTF-8 text ({error.reason})") from None
        except csv.Error as error:  # e.g. a field past csv's size limit
            raise DataError(f"{path} line {reader.line_num}: {error}") from None
        if columns is None:
            raise DataError(f"CSV file {path} has no data rows")
        if rows:
            yield _chunk(rows, columns)


#: Checked (sigma_core.config) before a run file's ``[data]`` table reaches :func:`read_csv`.
read_csv.argument_rules = {"sections": {...: "columns"}, "delimiter": "str", "skip_header": "int >= 0",
                           "mappings": {...: "mapping"}, "chunk_records": "int >= 1", "allow_non_finite": "bool"}


def _value(cell: str, column: int, mapping: dict[int, dict[str, float]], path: Path, line: int,
           allow_non_finite: bool) -> float:
    cell = cell.strip()
    if column in mapping:
        try:
            return mapping[column][cell]
        except KeyError:
            raise DataError(f"{path} line {line}, column {column}: value {cell!r} is not in the column's "
                            f"mapping ({', '.join(mapping[column])})") from None
    try:
        value = float(cell)
    except ValueError:
        raise DataError(f"{path} line {line}, column {column}: {cell!r} is not a number "
                        f"and the column has no value mapping") from None
    if not (allow_non_finite or math.isfinite(value)):
        raise DataError(f"{path} line {line}, column {column}: {cell!r} is not finite; set "
                        "data.allow_non_finite = true to train on non-finite values")
    return value


def _chunk(rows: list[list[float]], columns: dict[str, list[int]]) -> dict[str, np.ndarray]:
    table = np.array(rows, dtype=np.float64)
    return {name: table[:, cols] for name, cols in columns.items()}
