"""``sigma sample``: text from a checkpoint of a character model trained on the ``chars`` extractor.

The vocabulary is rebuilt from the checkpoint's run config (``data.vocabulary``,
else the training text, which ``--text`` can replace when it has moved). Each
new character comes from the network run on the last ``sequence`` characters,
as it saw them in training (a window starting from a zero state), shorter
windows while the text is shorter; the last step's logits, divided by the
temperature, give the probabilities, and ``--top-k K`` keeps only the K most
likely characters (as GPT-2's samplers do). Temperature 0 takes the most likely
character (greedy); ``--seed`` makes a sample repeatable. Characters are
printed as they come, so Ctrl-C keeps what was generated.

A ``--text`` whose vocabulary differs from the run's is refused: it would map
the network's classes to other characters. The run's vocabulary is known where
its config has ``data.vocabulary`` (given by the run file, or found in the text
and recorded by ``chars``) or its training text is still in place; otherwise
(a checkpoint older than that record) ``--text`` is held only against the
classes the network has.
"""

from __future__ import annotations

import codecs
import sys
from collections.abc import Iterator

from sigma_core import SigmaError


def add_parser(cli) -> None:
    from sigma_core import cli_options as options

    parser = cli.add_parser("sample", parents=[options.HANDLER, options.DEBUG],
                            help="generate text from a character-model checkpoint",
                            description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("checkpoint", help="a .ckpt of a run whose data.extractor is chars, the run file (.toml) "
                        "that trains it (the newest checkpoint of that run in its checkpoint.directory), or a run "
                        "folder (runs/<name>, runs/<name>/version_N: the newest checkpoint in it)")
    parser.add_argument("--length", type=options.ranged("int >= 0"), default=200,
                        help="characters to generate (default 200)")
    parser.add_argument("--temperature", type=options.ranged("number >= 0"), default=1.0,
                        help="> 0 (lower: more conservative), or 0 for greedy (default 1)")
    parser.add_argument("--top-k", type=options.ranged("int >= 1"), default=None, metavar="K",
                        help="sample only among the K most likely characters (default: all)")
    parser.add_argument("--seed", type=options.ranged("int >= 0"), default=None,
                        help="random seed (default: a fresh one each time)")
    parser.add_argument("--prime", default=None, help="text to start from (default: one random character)")
    parser.add_argument("--text", default=None, help="the training text, if it is no longer where the run file says")
    parser.set_defaults(run=run_sample)


def run_sample(args) -> int:
    sampler = Sampler(newest(args.checkpoint), handler=args.handler, dtype=args.dtype, text=args.text)
    pieces = sampler.stream(args.length, args.temperature, seed=args.seed, prime=args.prime,  # a bad prime: refused
                            top_k=args.top_k)
    try:
        for piece in pieces:
            sys.stdout.write(piece)
            sys.stdout.flush()  # each character as it comes: Ctrl-C keeps what was generated
    finally:
        sys.stdout.write("\n")  # the line ends, however the sample did
        sys.stdout.flush()
    return 0


def newest(given: str):
    """The checkpoint ``given`` names: itself, the newest in a run folder, or the newest the run of a run file
    saved in its ``checkpoint.directory``."""
    from pathlib import Path

    from sigma_core import latest_checkpoint, load_run_file

    if Path(given).is_dir():  # a run folder, runs/<name>/version_N: as sigma summary takes one
        found = max(Path(given).rglob("*.ckpt"), key=lambda path: path.stat().st_mtime, default=None)
        if found is None:
            raise SigmaError(f"{given}: no checkpoint in this folder or below it")
        return found
    if not given.endswith(".toml"):
        return given
    run_file, config = given, load_run_file(given)
    directory = config["checkpoint"]["directory"]
    found = latest_checkpoint(directory, config["name"])
    if found is None:
        raise SigmaError(f"{run_file}: no checkpoint of run {config['name']!r} in {directory} yet "
                         f"(sigma train {run_file} saves them there)")
    return found


class Sampler:
    """A checkpoint's network and vocabulary, ready to :meth:`sample` (see the module docstring)."""

    def __init__(self, checkpoint, handler=None, dtype=None, text=None):
        from sigma_core import create_handler, load_checkpoint

        from .chars import build_vocabulary

        self.checkpoint = load_checkpoint(checkpoint)
        config = self.checkpoint.config
        data = (config or {}).get("data", {})
        if data.get("extractor", data.get("source")) != "chars":  # source: an older checkpoint's name for it
            raise SigmaError(f"{self.checkpoint.path}: not a character model (its run's data.extractor is "
                             f"{data.get('extractor', data.get('source', 'not recorded'))!r}, sample needs chars)")
        self.encoding = data.get("encoding", "utf-8")
        known = self._run_vocabulary(data, gone_is_fine=text is not None)
        if text is None:
            self.symbols = known
        else:
            self.symbols = build_vocabulary(text, self.encoding, data.get("errors", "strict"))
            if known is not None:
                self._refuse_other_vocabulary(text, known, given=data.get("vocabulary") is not None)
        self.layers = config["network"]["layers"]
        shape = next((spec.get("shape") for spec in self.layers if spec["type"] == "input"), None)
        shape = [shape] if isinstance(shape, int) else shape
        if not (isinstance(shape, list) and len(shape) == 1):
            raise SigmaError(f"{self.checkpoint.path}: the network's input layer must take shape [sequence], "
                             f"it takes {shape}")
        self.window = shape[0]
        saved = self.checkpoint.metadata["handler"]["dtype"]
        self.handler = create_handler(handler, dtype=dtype or saved, seed=0)
        self._networks = {}
        classes = self._classes()
        if len(self.symbols) > classes:
            raise SigmaError(f"{text if text is not None else self.checkpoint.path}: {len(self.symbols)} symbols, more "
                             f"than the {classes} classes of the network: not the text it was trained on")

    def _run_vocabulary(self, data: dict, gone_is_fine: bool):
        """The run's symbols, from ``data.vocabulary`` or its training text in place; None if that is gone."""
        from sigma_core import resolve_path

        from .chars import build_vocabulary

        if data.get("vocabulary") is not None:
            return build_vocabulary(data["path"], self.encoding, given=data["vocabulary"])
        try:
            path = resolve_path(data["path"], key="data.path")
        except SigmaError as error:
            if gone_is_fine:
                return None
            raise SigmaError(f"{self.checkpoint.path}: its vocabulary comes from the training text, which is gone "
                             f"({error}); give it with --text FILE") from None
        return build_vocabulary(path, self.encoding, data.get("errors", "strict"))

    def _refuse_other_vocabulary(self, text, known, given: bool) -> None:
        """Refuse ``--text`` unless its symbols are the run's (within them, where the run file gave a vocabulary)."""
        import numpy

        from .chars import describe_symbol

        extra = numpy.setdiff1d(self.symbols, known)
        missing = [] if given else numpy.setdiff1d(known, self.symbols)
        if len(extra) or len(missing):
            first = (f"{describe_symbol(int(extra[0]), self.encoding)} is not in the run's" if len(extra) else
                     f"the run's {describe_symbol(int(missing[0]), self.encoding)} is not in it")
            raise SigmaError(f"--text {text}: its vocabulary ({len(self.symbols)} symbols) is not the run's "
                             f"({len(known)}): {first}; sampling would map the network's classes to other characters")
        self.symbols = known

    def _classes(self) -> int:
        """How many symbols the network can take and give: its one_hot classes, and its output's width."""
        from .layers import OneHot

        network = self._network(1)
        widths = [layer.classes for layer in network.layers.values() if isinstance(layer, OneHot)]
        output = next(layer for layer in reversed(network.layers.values()) if not layer.is_cost)
        return min([*widths, output.output_shape[-1]])

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

    def sample(self, length: int, temperature: float, *, seed=None, prime: str | None = None,
               top_k: int | None = None) -> str:
        """The whole text :meth:`stream` gives, at once."""
        return "".join(self.stream(length, temperature, seed=seed, prime=prime, top_k=top_k))

    def stream(self, length: int, temperature: float, *, seed=None, prime: str | None = None,
               top_k: int | None = None) -> Iterator[str]:
        """The prime (or one random character), then ``length`` generated characters, each as it comes; with
        ``top_k``, each drawn from the ``top_k`` most likely only (more where the k-th ties).

        A bad prime is refused at once, before the first character."""
        import numpy

        from .chars import encode

        rng = numpy.random.default_rng(seed)
        if prime:
            indices = list(encode(prime, self.symbols, self.encoding, "--prime"))
        else:
            indices = [int(rng.integers(len(self.symbols)))]
        return self._generate(indices, length, temperature, rng, top_k)

    def _generate(self, indices: list, length: int, temperature: float, rng, top_k) -> Iterator[str]:
        import numpy

        from .chars import decode

        # bytes may split a UTF-8 character: decode them as a stream
        text = codecs.getincrementaldecoder("utf-8")("replace") if self.encoding == "bytes" else None

        def piece(new: list, final: bool = False) -> str:
            if text is None:
                return decode(new, self.symbols, self.encoding)
            return text.decode(bytes(self.symbols[numpy.asarray(new, numpy.int64)].astype(numpy.uint8)), final)

        yield piece(indices)
        for _ in range(length):
            context = numpy.array(indices[-self.window :])
            logits = self._network(len(context)).predict(context[None]).astype(numpy.float64)
            # the last step's logits; classes beyond the vocabulary are never sampled
            logits = logits.reshape(-1, logits.shape[-1])[-1, : len(self.symbols)]
            if temperature == 0:
                indices.append(int(logits.argmax()))
            else:
                p = numpy.exp((logits - logits.max()) / temperature)  # shifted first: no overflow as temperature -> 0
                if top_k is not None and top_k < len(p):
                    p[logits < numpy.partition(logits, -top_k)[-top_k]] = 0.0
                indices.append(int(rng.choice(len(p), p=p / p.sum())))
            yield piece(indices[-1:])
        if text is not None:
            yield text.decode(b"", True)
