"""``sigma dream CHECKPOINT``: target maximisation on a saved network, its inputs written as a picture."""

import argparse

def add_dream_command(cli) -> None:
    from sigma_core import cli_options  # the sigma command's own (imported here: this hook runs only there)

    from sigmann_debug.settings import Settings  # its defaults, without the dreaming code (NumPy)

    parser = cli.add_parser(
        "dream", parents=[cli_options.DEBUG, cli_options.HANDLER],
        help="the input a trained network takes for a class (target maximisation), as a picture",
        description="Optimise inputs from a small Gaussian start until the network saved in CHECKPOINT outputs each "
                    "target (a copy of it: the checkpoint is unchanged), then write them: an image grid (PNG) for "
                    "image-shaped inputs, else a .npy, and print the cost each reached.")
    number = cli_options.ranged
    parser.add_argument("checkpoint", help="a .ckpt checkpoint (or an export a loader reads)")
    parser.add_argument("--target", action="append", type=_target, metavar="CLASS|V1,V2,...",
                        help="a class index or a target vector (repeatable; default: every class)")
    parser.add_argument("--out", default="dream.png", help="where to write (suffix .png or .npy by the input shape; "
                                                           "default dream.png)")
    parser.add_argument("--desired-cost", type=number("real > 0"), default=Settings.desired_cost,
                        help="stop once the network's cost for the target is at most this (default 0.06)")
    parser.add_argument("--steps", dest="max_steps", type=number("int >= 1"), default=Settings.max_steps,
                        help="at most this many steps per attempt (default 1024)")
    parser.add_argument("--attempts", type=number("int >= 1"), default=Settings.attempts,
                        help="new starts for a target that falls short (default 2)")
    parser.add_argument("--sigma", type=number("real > 0"), default=Settings.sigma,
                        help="standard deviation of the Gaussian start (default 0.01)")
    parser.add_argument("--learning-rate", type=number("real > 0"), default=Settings.learning_rate,
                        help="Adam's learning rate on the input (default 0.05)")
    parser.add_argument("--l2", type=number("real >= 0"), default=Settings.l2,
                        help="weight of the mean squared input in the objective (default 0.001)")
    parser.add_argument("--clip", type=_clip, default=Settings.clip, metavar="LOW,HIGH|none",
                        help="keep the input in this range, the network's preprocessed one (default 0,1)")
    parser.add_argument("--blur", type=number("real >= 0"), default=Settings.blur,
                        help="Gaussian blur of image inputs, sigma in pixels, every 4 steps (default 0: none)")
    parser.add_argument("--seed", type=number("int >= 0"), default=0, help="seed of the starts (default 0)")
    parser.set_defaults(run=run_dream)


def run_dream(args) -> int:
    from sigma_core import load

    from sigmann_debug.dream import Settings, dream, interface
    from sigmann_debug.images import image_shape, write_dreams

    network = load(args.checkpoint, args.handler, dtype=args.dtype)
    input_shape, outputs = interface(network)[2:]
    settings = Settings(**{key: getattr(args, key) for key in Settings.__dataclass_fields__ if key in args})
    results = [dream(network, target, settings, image_shape=image_shape(input_shape), seed=args.seed + index)
               for index, target in enumerate(args.target or range(outputs))]
    for result in results:
        print(f"target {_spelled(result.target)}: cost {result.cost:.4g} after {result.steps} steps "
              f"(attempt {result.attempts}){'' if result.reached else f', above {args.desired_cost}'}")
    print(f"wrote {write_dreams(results, input_shape, args.out)}")
    return 0


def _target(text: str):
    """``7`` (a class) or ``0,0.5,1`` (a vector)."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a class index or comma-separated numbers, got {text!r}") from None
    if len(values) == 1:
        if not values[0].is_integer() or values[0] < 0:
            raise argparse.ArgumentTypeError(f"a class index is an integer >= 0, got {text!r}")
        return int(values[0])
    return values


def _clip(text: str):
    """``0,1`` -> (0.0, 1.0); ``none`` -> None."""
    if text.strip().lower() == "none":
        return None
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH or none, got {text!r}") from None
    if not low < high:
        raise argparse.ArgumentTypeError(f"LOW must be below HIGH, got {text!r}")
    return low, high


def _spelled(target) -> str:
    return str(target) if isinstance(target, int) else ",".join(f"{v:g}" for v in target)
