"""CSV export of the meters' series (the meters dock's "Export CSV").

Long format, one row per point: ``time_utc, t_s, series, unit, value``. ``t_s``
is seconds on the meters' monotonic clock (what the charts plot); ``time_utc`` is
the same instant as wall time. A gap (no reading) is written as ``n/a``.
"""

from __future__ import annotations

import csv
import os
import tempfile
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from workstation.core.series import SeriesBook

HEADER = ("time_utc", "t_s", "series", "unit", "value")


def export_series_csv(book: SeriesBook, path: Path, names: Iterable[str] | None = None) -> int:
    """Write the series (all, or ``names``) to ``path`` atomically; returns data rows written."""
    wanted = list(names) if names is not None else book.names()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".meters-", suffix=".csv.tmp")
    rows = 0
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(HEADER)
            for name in wanted:
                series = book.get(name)
                if series is None:
                    continue
                for t, value in series.points():
                    wall = datetime.fromtimestamp(t + book.wall_offset_s, tz=timezone.utc)
                    writer.writerow((
                        wall.isoformat(timespec="milliseconds"),
                        f"{t:.3f}",
                        name,
                        series.unit,
                        "n/a" if value is None else repr(value),
                    ))
                    rows += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return rows
