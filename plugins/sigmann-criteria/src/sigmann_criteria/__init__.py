"""sigmann-criteria: Sigma's declarative hooks, gated by criteria and reading the run's registry.

Reporters, scorers, processors, value modifiers and a criteria stopper
(:mod:`sigmann_criteria.hook` explains cadences, criteria and the
registry), registered through ``register_hooks`` on the core's hook protocol,
lazily: discovery imports nothing here but this module.
"""

from sigma_core import hookimpl


@hookimpl
def register_hooks(register):
    package = "sigmann_criteria"
    register("value_reporter", f"{package}.reporters:ValueReporter", description="logs registry values")
    register("accumulated_value_reporter", f"{package}.reporters:AccumulatedValueReporter",
             description="logs a value's mean (or sum) since the last report")
    register("epoch_iteration_reporter", f"{package}.reporters:EpochIterationReporter",
             description="logs epoch and iteration")
    register("running_time", f"{package}.reporters:RunningTimeReporter", aliases=("running_time_reporter",),
             description="logs iterations/s and time per iteration or epoch (average, min, max)")
    register("accuracy_reporter", f"{package}.reporters:AccuracyReporter",
             description="logs top-k (or thresholded binary) accuracy on a validation iterator")
    register("accuracy_scorer", f"{package}.scorers:AccuracyScorer",
             description="writes shared.<iterator>.accuracy_top<k>")
    register("binary_accuracy_scorer", f"{package}.scorers:BinaryAccuracyScorer",
             description="writes shared.<iterator>.accuracy for one thresholded output")
    register("number_accumulator", f"{package}.processors:NumberAccumulator", description="sums or averages a value")
    register("metric_processor", f"{package}.processors:MetricProcessor",
             description="mean and std of weights and of updates into shared.metrics")
    register("stop_when", f"{package}.stoppers:StopWhen", description="stops when its criteria pass")
    register("clip", f"{package}.modifiers:Clip", description="clips parameters matching a glob after each step")
    register("scale", f"{package}.modifiers:Scale", description="scales parameters matching a glob after each step")
