"""``sigma eval``: accuracy and cost of a checkpoint on a dataset of its run."""

import json

from sigma_core import SigmaError, cli_options as options


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "eval", parents=[options.HANDLER, options.JSON, options.DEBUG],
        help="accuracy and cost of a checkpoint on a dataset", description="Load a checkpoint's parameters and "
        "report accuracy and cost on a dataset of its run: the held-out split by default.")
    parser.add_argument("checkpoint", help="checkpoint file (.ckpt)")
    parser.add_argument("--data-config", metavar="RUNFILE",
                        help="take [data] and [split] from this run file instead of the checkpoint's run config")
    parser.add_argument("--dataset", default="validation", help="validation (the held-out split, default) or training")
    return parser


def main(args) -> int:
    from sigma_core import CheckpointError, MinibatchIterator, apply_override, build_run, load_checkpoint, load_run_file

    checkpoint = load_checkpoint(args.checkpoint)
    cfg = checkpoint.config  # this process's own copy: changed below
    if args.data_config:
        given = load_run_file(args.data_config)
        cfg = given if cfg is None else {**cfg, "data": given["data"], "split": given["split"]}
    if cfg is None:
        raise SigmaError(f"{args.checkpoint}: the checkpoint has no run config (saved from code); "
                         "pass --data-config RUNFILE")
    cfg["handler"]["dtype"] = checkpoint.metadata["handler"]["dtype"]
    for override in options.run_overrides(args):  # --handler, --dtype and SIGMA_HANDLER over the saved run's
        apply_override(cfg, override)
    if checkpoint.metadata["preprocess"] is not None:  # the statistics the network was trained with, not refitted
        cfg["data"]["preprocess"] = checkpoint.metadata["preprocess"]
    run = build_run(cfg)
    trainer = run.trainer
    trainer.initialise(run.handler)
    try:
        trainer.network.load_state_dict(checkpoint.parameters)
    except SigmaError as error:  # parameters that do not match the network its config describes
        raise CheckpointError(f"checkpoint {args.checkpoint}: does not fit the run's network ({error})") from None
    datasets = {**trainer.validation, "training": MinibatchIterator(
        trainer.training_iterator.dataset, cfg["training"]["validation_batch_size"], shuffle=False)}
    if args.dataset not in datasets:
        raise SigmaError(f"no dataset {args.dataset!r} (choose one of {', '.join(datasets)})")
    report = trainer.evaluate(datasets[args.dataset])
    report.update(checkpoint=str(args.checkpoint), dataset=args.dataset, epoch=checkpoint.trainer["epoch"],
                  iteration=checkpoint.trainer["iteration"], handler=run.handler.name, dtype=run.handler.dtype)
    print(json.dumps(report, indent=2) if args.json else f"{args.checkpoint}: {args.dataset} ({report['records']} "
          f"records): accuracy {report['accuracy']:.2%}, cost {report['cost']:.4f}")
    return 0
