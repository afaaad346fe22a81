"""Private rows handed over in memory (the Python API's ``release(data=...)``): a polars or
pandas DataFrame or a pyarrow Table, read by `release.private_data` like a query's result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from selpe_audit.errors import UserError

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True, repr=False)
class FrameSource:
    """An in-memory table as polars. Its text form names only the kind, never a value: it
    appears in messages."""

    frame: pl.DataFrame
    display: str = "the DataFrame"

    @classmethod
    def of(cls, data: Any) -> FrameSource | None:
        """``data`` as a frame source, or None when it is no in-memory table."""
        import polars as pl

        if isinstance(data, pl.DataFrame):
            return cls(data, "the polars DataFrame")
        kind = f"{type(data).__module__.split('.')[0]}.{type(data).__name__}"
        if kind == "pandas.DataFrame":
            return cls(_converted(pl.from_pandas, data), "the pandas DataFrame")
        if kind == "pyarrow.Table":
            return cls(_converted(pl.from_arrow, data), "the pyarrow Table")
        return None

    def __str__(self) -> str:
        return self.display

    __repr__ = __str__


def _converted(convert: Any, data: Any) -> pl.DataFrame:
    """polars' conversion, its failure one line (the library's message may quote a value)."""
    import polars as pl

    try:
        frame = convert(data)
    except Exception as e:
        raise UserError(f"the {type(data).__name__} cannot be read as a table "
                        f"({type(e).__name__}); give plain columns of strings and "
                        "numbers") from None
    if not isinstance(frame, pl.DataFrame):
        raise UserError(f"the {type(data).__name__} is not a table of columns")
    return frame
