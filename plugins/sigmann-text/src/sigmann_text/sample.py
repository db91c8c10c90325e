"""``sigma sample``: text from a checkpoint of a character model trained on the ``chars`` extractor.

The vocabulary is rebuilt from the checkpoint's run config (``data.vocabulary``,
else the training text, which ``--text`` can replace when it has moved). Each
new character comes from the network run on the last ``sequence`` characters,
as it saw them in training (a window starting from a zero state), shorter
windows while the text is shorter; the last step's logits, divided by the
temperature, give the probabilities. Temperature 0 takes the most likely
character (greedy); ``--seed`` makes a sample repeatable.
"""

from __future__ import annotations

import math
import sys

from sigma_core import SigmaError


def add_parser(cli) -> None:
    from sigma_core import cli_options as options

    parser = cli.add_parser("sample", parents=[options.HANDLER, options.DEBUG],
                            help="generate text from a character-model checkpoint",
                            description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("checkpoint", help="a .ckpt of a run whose data.source is chars")
    parser.add_argument("--length", default="200", help="characters to generate (default 200)")
    parser.add_argument("--temperature", default="1.0",
                        help="> 0 (lower: more conservative), or 0 for greedy (default 1)")
    parser.add_argument("--seed", default=None, help="random seed (default: a fresh one each time)")
    parser.add_argument("--prime", default=None, help="text to start from (default: one random character)")
    parser.add_argument("--text", default=None, help="the training text, if it is no longer where the run file says")
    parser.set_defaults(run=run_sample)


def _number(option: str, value: str, kind, rule: str, valid) -> float | int:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not valid(number):
        raise SigmaError(f"--{option} must be {rule}, got {value!r}")
    return number


def run_sample(args) -> int:
    length = _number("length", args.length, int, "an integer >= 0", lambda n: n >= 0)
    temperature = _number("temperature", args.temperature, float, "a finite number >= 0",
                          lambda t: math.isfinite(t) and t >= 0)
    seed = None if args.seed is None else _number("seed", args.seed, int, "an integer >= 0", lambda s: s >= 0)
    sampler = Sampler(args.checkpoint, handler=args.handler, dtype=args.dtype, text=args.text)
    sys.stdout.write(sampler.sample(length, temperature, seed=seed, prime=args.prime) + "\n")
    return 0


class Sampler:
    """A checkpoint's network and vocabulary, ready to :meth:`sample` (see the module docstring)."""

    def __init__(self, checkpoint, handler=None, dtype=None, text=None):
        from sigma_core import create_handler, load_checkpoint, resolve_handler_name, resolve_path

        from .chars import build_vocabulary

        self.checkpoint = load_checkpoint(checkpoint)
        config = self.checkpoint.config
        data = (config or {}).get("data", {})
        if data.get("source") != "chars":
            raise SigmaError(f"{self.checkpoint.path}: not a character model (its run's data.source is "
                             f"{data.get('source', 'not recorded')!r}, sample needs chars)")
        self.encoding = data.get("encoding", "utf-8")
        path = text if text is not None else data["path"]
        if data.get("vocabulary") is None and text is None:
            try:
                path = resolve_path(path, key="data.path")
            except SigmaError as error:
                raise SigmaError(f"{self.checkpoint.path}: its vocabulary comes from the training text, which is gone "
                                 f"({error}); give it with --text FILE") from None
        self.symbols = build_vocabulary(path, self.encoding, data.get("errors", "strict"), data.get("vocabulary"))
        self.layers = config["network"]["layers"]
        shape = next((spec.get("shape") for spec in self.layers if spec["type"] == "input"), None)
        shape = [shape] if isinstance(shape, int) else shape
        if not (isinstance(shape, list) and len(shape) == 1):
            raise SigmaError(f"{self.checkpoint.path}: the network's input layer must take shape [sequence], "
                             f"it takes {shape}")
        self.window = shape[0]
        name, source = resolve_handler_name(cli=handler)
        saved = self.checkpoint.metadata["handler"]["dtype"]
        self.handler = create_handler(name, dtype=dtype or saved, seed=0, source=source)
        self._networks = {}

    def _network(self, steps: int):
        """The network with its input ``steps`` long (parameter shapes do not depend on it), built once."""
        if steps not in self._networks:
            from sigma_core import Network, from_layer_list

            layers = [dict(spec, shape=[steps]) if spec["type"] == "input" else spec for spec in self.layers]
            network = Network(from_layer_list(layers), name=self.checkpoint.config["name"])
            network.initialise(self.handler)
            network.load_state_dict(self.checkpoint.parameters)
            self._networks[steps] = network
        return self._networks[steps]

    def sample(self, length: int, temperature: float, *, seed=None, prime: str | None = None) -> str:
        import numpy

        from .chars import decode, encode

        rng = numpy.random.default_rng(seed)
        if prime:
            indices = list(encode(prime, self.symbols, self.encoding, "--prime"))
        else:
            indices = [int(rng.integers(len(self.symbols)))]
        for _ in range(length):
            context = numpy.array(indices[-self.window :])
            logits = self._network(len(context)).predict(context[None]).astype(numpy.float64)
            # the last step's logits; classes beyond the vocabulary are never sampled
            logits = logits.reshape(-1, logits.shape[-1])[-1, : len(self.symbols)]
            if temperature == 0:
                indices.append(int(logits.argmax()))
                continue
            p = numpy.exp((logits - logits.max()) / temperature)  # shifted first: no overflow as temperature -> 0
            indices.append(int(rng.choice(len(p), p=p / p.sum())))
        return decode(indices, self.symbols, self.encoding)
