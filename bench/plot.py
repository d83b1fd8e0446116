"""Drain rate against concurrency for each system, from the JSON of one `python -m bench` run.

    .venv/bin/python -m bench.plot RUN.json [--output docs/_static/bench-drain.png]

Needs matplotlib (the `bench` extra: pip install -e ".[bench]"). One line per system through
its matched concurrencies (2, 4, 10 at once), its defaults marked apart with their concurrency;
each point the median of the run's takes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.peers import MATCHED

ROOT = Path(__file__).resolve().parents[1]


def points(data: dict[str, Any], system: str) -> tuple[list[tuple[int, float]], tuple[int, float]]:
    setups = data["medians"][system]["setups"]
    default = setups["default"]
    matched = []
    for c in MATCHED:
        cell = setups.get(str(c)) or (default if default["concurrency"] == c else None)
        if cell is not None:
            matched.append((c, cell["drain"]))
    return matched, (default["concurrency"], default["drain"])


def plot(data: dict[str, Any], output: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit('bench.plot needs matplotlib: pip install -e ".[bench]"') from None
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    for system, label in data["labels"].items():
        matched, (dc, drain) = points(data, system)
        line = ax.plot(
            [c for c, _ in matched], [v for _, v in matched], marker="o", label=label,
            linewidth=2.4 if system == "ours" else 1.4,
        )  # fmt: skip
        ax.scatter([dc], [drain], marker="*", s=140, color=line[0].get_color(), zorder=3)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 10, 16])
    ax.set_xticklabels(["1", "2", "4", "8", "10", "16"])
    ax.set_xlabel("jobs at once in one worker process tree (star: the system's defaults)")
    ax.set_ylabel("drain, jobs/s (each job one Redis INCR)")
    machine = data["machine"]
    ax.set_title(
        f"Drain rate by concurrency, {machine['cores']} cores, one Redis "
        f"(django-jobs {data['revision'].split()[0]})",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output)
    print(f"wrote {output}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.plot", description=__doc__)
    parser.add_argument("run", type=Path, help="the --json file of a python -m bench run")
    parser.add_argument("--output", type=Path, default=ROOT / "docs/_static/bench-drain.png")
    args = parser.parse_args()
    plot(json.loads(args.run.read_text()), args.output)


if __name__ == "__main__":
    main()
