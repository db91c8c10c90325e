"""sigmann-debug's registrations: the ``debug`` handler and hook, the ``dream`` hook and ``sigma dream``.

Every ``sigma`` command builds its parser through :func:`register_commands`, so this module imports nothing heavy.
"""

from sigma_core import hookimpl


@hookimpl
def register_handlers(register):
    register("debug", "sigmann_debug.handler:DebugHandler", rank=-1,  # never auto's pick: it wraps the one auto picks
             description="wraps another handler (debug:cpu), checking every op and VJP for NaN, Inf, shapes, limits")


@hookimpl
def register_hooks(register):
    register("debug", "sigmann_debug.checking_hook:DebugChecks",
             description="the debug handler's checks for a run (nan, inf, shapes, limit, throw); counts its reports")
    register("dream", "sigmann_debug.dream_hook:Dream",
             description="every N epochs, the inputs the network takes for each class, as an image grid")


@hookimpl
def register_commands(cli):
    from sigmann_debug.command import add_dream_command

    add_dream_command(cli)
