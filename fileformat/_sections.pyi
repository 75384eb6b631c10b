from typing import Any

FIGURES: int

def figures(
    sections: Any,
    start_at: int,
    count_at: int,
    offsets: Any,
    timestamps: Any = None,
    sizes: Any = None,
    values_validity: Any = None,
    values_bit: int = 0,
    horizons: Any = None,
    horizons_validity: Any = None,
    horizons_bit: int = 0,
) -> tuple[int, list[tuple[Any, ...]]]: ...
