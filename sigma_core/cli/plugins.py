"""``sigma plugins``: every registered component, who provides it, whether it runs here."""

import contextlib
import json
import sys

from sigma_core.cli import options

#: Seconds of plugin loading worth pointing out: every ``sigma`` command pays them.
SLOW_SECONDS = 0.5


def add_parser(subparsers):
    return subparsers.add_parser(
        "plugins", parents=[options.JSON, options.DEBUG], help="list registered components and failed plugins",
        description="List every registered component, whether it can run here, and the plugins that failed to load.")


def main(args) -> int:
    from sigma_core import plugins

    with contextlib.redirect_stdout(sys.stderr):  # a plugin's check may print; stdout holds only the listing
        seconds = plugins.load_seconds()
        rows = [_row(component, seconds.get(component.distribution, 0.0)) for component in plugins.components()]
        failed = [{"kind": "plugin-failure", "name": f.name, "aliases": [], "distribution": f.distribution,
                   "version": f.version, "available": False, "reason": f.error} for f in plugins.failures()]
    if args.json:
        print(json.dumps(rows + failed, indent=2))
        return 0
    # Plain aligned text: it never wraps or truncates, so it greps and pipes well.
    lines = [("KIND", "NAME", "ALIASES", "DISTRIBUTION", "VERSION", "STATUS")] + [
        (row["kind"], row["name"], ", ".join(row["aliases"]), row["distribution"], row["version"],
         ("available" if row["available"] else "unavailable") + (f" — {row['reason']}" if row["reason"] else ""))
        for row in rows]  # an available handler's reason may name its devices
    widths = [max(map(len, column)) for column in list(zip(*lines))[:-1]]
    print("\n".join("  ".join([*map(str.ljust, line, widths), line[-1]]) for line in lines))
    if failed:
        print(f"\n{len(failed)} plugin(s) failed to load:")
        print("\n".join(f"  {row['name']} ({row['distribution']} {row['version']}): {row['reason']}" for row in failed))
    slow = sorted(((time, name) for name, time in seconds.items() if time > SLOW_SECONDS), reverse=True)
    if slow:
        print(f"\n{len(slow)} plugin distribution(s) slow to load (every sigma command waits for them):")
        print("\n".join(f"  {name}: {time:.1f} s" for time, name in slow))
    return 0


def _row(component, load_seconds: float) -> dict:
    available, reason = component.availability()
    return {"kind": component.kind, "name": component.name, "aliases": list(component.aliases),
            "distribution": component.distribution, "version": component.version, "rank": component.rank,
            "description": component.description, "available": available, "reason": reason,
            "load_seconds": round(load_seconds, 3)}
