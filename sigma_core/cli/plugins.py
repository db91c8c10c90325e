"""``sigma plugins``: every registered component, who provides it, whether it runs here."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "plugins",
        help="list registered components and failed plugins",
        description="List every registered component, whether it can run here, "
        "and the plugins that failed to load.",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    parser.set_defaults(run=run_plugins)


#: Seconds of plugin loading worth pointing out: every ``sigma`` command pays them.
SLOW_SECONDS = 0.5


def run_plugins(args: argparse.Namespace) -> int:
    from sigma_core import plugins

    with contextlib.redirect_stdout(sys.stderr):  # a plugin's check may print; stdout holds only the listing
        rows = [_component_row(c) for c in plugins.components()]
        failed = [_failure_row(f) for f in plugins.failures()]
        seconds = plugins.load_seconds()
    for row in rows:
        row["load_seconds"] = round(seconds.get(row["distribution"], 0.0), 3)
    if args.json:
        print(json.dumps(rows + failed, indent=2))
    else:
        _print_plugins_table(rows, failed)
        slow = {name: time for name, time in seconds.items() if time > SLOW_SECONDS}
        if slow:
            print(f"\n{len(slow)} plugin distribution(s) slow to load (every sigma command waits for them):")
            for name, time in sorted(slow.items(), key=lambda item: -item[1]):
                print(f"  {name}: {time:.1f} s")
    return 0


def _component_row(component) -> dict:
    available, reason = component.availability()
    return {
        "kind": component.kind,
        "name": component.name,
        "aliases": list(component.aliases),
        "distribution": component.distribution,
        "version": component.version,
        "rank": component.rank,
        "description": component.description,
        "available": available,
        "reason": reason,
    }


def _failure_row(failure) -> dict:
    return {
        "kind": "plugin-failure",
        "name": failure.name,
        "aliases": [],
        "distribution": failure.distribution,
        "version": failure.version,
        "available": False,
        "reason": failure.error,
    }


def _print_plugins_table(rows: list[dict], failed: list[dict]) -> None:
    """Plain aligned text: it never wraps or truncates, so it greps and pipes well."""
    header = ("KIND", "NAME", "ALIASES", "DISTRIBUTION", "VERSION", "STATUS")
    lines = [header] + [
        (
            row["kind"],
            row["name"],
            ", ".join(row["aliases"]),
            row["distribution"],
            row["version"],
            "available" if row["available"] else f"unavailable — {row['reason']}",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        print("  ".join([*(cell.ljust(width) for cell, width in zip(line, widths)), line[-1]]))
    if failed:
        print(f"\n{len(failed)} plugin(s) failed to load:")
        for row in failed:
            print(f"  {row['name']} ({row['distribution']} {row['version']}): {row['reason']}")
