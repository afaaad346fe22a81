"""``selpe-audit decode``: the off-site stage's command, a thin layer over `decode.api`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from decode.api import GPU_ENV, decode_settings, decode_to
from decode.chunks import CHUNK_ROWS
from decode.decoders import decoder_names, registry
from decode.pipeline import DEFAULT_DECODER
from selpe_audit.cli.command import Command


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("artifact", type=Path, help="release artifact folder (holds release.json)")
    p.add_argument("--trust", type=Path, action="append", default=[], metavar="KEY.pub.pem",
                   help="public key you trust (repeatable): the release key, reviewers' keys")
    p.add_argument("--release-key", type=Path, metavar="RELEASE.pub.pem",
                   help="the releaser's public key: its signature is required, and approvals "
                        "are the other trusted keys' signatures (needed with "
                        "--require-approvals)")
    p.add_argument("--require-approvals", type=int, default=0, metavar="N",
                   help="distinct trusted reviewer signatures required besides the release "
                        "key's (--release-key)")
    p.add_argument("--n", type=int, required=True, help="synthetic rows to write")
    p.add_argument("--out", type=Path, required=True,
                   help="output file: .parquet, .csv or .jsonl")
    p.add_argument("--model", help="GGUF for the LLM decoder (default: the bundled Gemma 3 270M)")
    p.add_argument("--gpu-layers", type=int, default=None,
                   help=f"layers to offload to a GPU, -1 = all (default: ${GPU_ENV} or 0)")
    p.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    p.add_argument("--decoder", choices=decoder_names(), default=DEFAULT_DECODER,
                   help=registry.help_text(DEFAULT_DECODER))
    p.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS, metavar="R",
                   help=f"rows made, selected, fitted and written at a time (default "
                        f"{CHUNK_ROWS:,}): memory is flat in --n; a crash loses at most the "
                        f"chunk being made; the fit matches the released counts per chunk")
    sh = p.add_argument_group("shards and clusters")
    sh.add_argument("--shards", type=int, metavar="S",
                    help="split the plan into S parts, each seeded by (seed, class, part): the "
                         "same records wherever and in whatever order the parts run (default "
                         "1; with --ray, one part per GPU or CPU of the cluster)")
    sh.add_argument("--shard", type=int, metavar="I",
                    help="make only part I (0 .. S-1) of --shards S into --out, with its own "
                         "checkpoint and provenance; the parts' JSONL outputs, concatenated in "
                         "order, equal one run with --shards S")
    sh.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                    help="run the parts as Ray tasks on the cluster whose head is ADDRESS "
                         "(host:port, or auto), or on a local Ray when no ADDRESS is given, "
                         "and merge them into --out (needs the cluster extra; paths must be "
                         "the same on every node)")
    abl = p.add_argument_group("selection and ablations")
    abl.add_argument("--overgenerate", type=float, default=2.0, metavar="F",
                     help="candidates per output row before selection (default 2)")
    abl.add_argument("--select-top", action=argparse.BooleanOptionalAction, default=None,
                     help="rank candidates by distance to the class's DP-selected winners "
                          "(SelectTop; default: on for the llm decoder, off for marginals "
                          "and model, where it moves the histograms away from the released "
                          "counts)")
    abl.add_argument("--no-fit", dest="fit", action="store_false",
                     help="skip the fit to the released counts (IPF, sampling, swaps, redraw)")
    abl.add_argument("--single-stage", dest="two_stage", action="store_false",
                     help="generate records in one stage (no latent context)")
    abl.add_argument("--whole-records", dest="hybrid", action="store_false",
                     help="llm decoder on an artifact with a counts model: let the LLM write "
                          "whole records (two-stage) instead of only the free text of records "
                          "whose fields come from the model")
    abl.add_argument("--paraphrase-phrases", action="store_true",
                     help="llm decoder on a model-mode artifact: let the LLM rewrite a "
                          "record's released phrase too (default: the record keeps it, as "
                          "rewriting made the text more varied but less telling of the "
                          "class, benchmarks/RESULTS.md 'paraphrase'; the LLM writes "
                          "\"other\" and long-text topics)")


def _run(args: argparse.Namespace) -> int:
    settings = decode_settings(args.n, decoder=args.decoder, seed=args.seed,
                               overgenerate=args.overgenerate, select_top=args.select_top,
                               fit=args.fit, two_stage=args.two_stage, hybrid=args.hybrid,
                               paraphrase_phrases=args.paraphrase_phrases, model=args.model,
                               gpu_layers=args.gpu_layers,
                               shards=1 if args.shards is None else args.shards,
                               shard=args.shard, chunk_rows=args.chunk_rows)
    con = Console(stderr=True, highlight=False)
    result = decode_to(args.artifact, args.trust, args.require_approvals, args.out, settings,
                       con, release_key=args.release_key, ray=args.ray, ray_parts=args.shards)
    doc = result.provenance_doc
    t = Table(title=f"decoded {result.rows} rows into {result.out}")
    for col in ("class", "rows", "candidates"):
        t.add_column(col)
    for c, n in doc["rows_per_class"].items():
        t.add_row(c, str(n), str(doc["candidates_per_class"][c]))
    Console(highlight=False).print(t)
    tvd = doc["fidelity"]["tvd_to_released"]["histograms_mean"]
    before = doc["fidelity"]["candidates_tvd_to_released"]  # per part when merged
    if tvd is not None:
        con.print(f"TVD to the released histograms: {tvd:.3f}" + (
            "" if before is None else
            f" (candidates before selection: {before['histograms_mean']:.3f})"))
    if "shards" in doc:
        con.print(f"merged {doc['shards']['count']} shards ({doc['shards']['backend']})")
    elif doc["shard"]["count"] > 1:
        con.print(f"shard {doc['shard']['index']} of {doc['shard']['count']}")
    con.print(f"all {doc['validity']['records_checked']} rows valid; provenance in "
              f"{result.provenance}")
    return 0


COMMAND = Command(
    name="decode",
    help="(off-site) turn a verified artifact into synthetic records",
    description="Verify the artifact's signatures against keys you trust, then decode N "
                "synthetic rows from it alone: allocate rows over classes from the noisy "
                "counts, generate candidates (local LLM with few-shot DP exemplars and a "
                "schema grammar, the marginals baseline, or whole records from the counts "
                "model), keep those closest to the DP winners (SelectTop), fit them to the "
                "released counts (IPF, systematic sampling, swaps, within-bin redraw) and "
                "write Parquet/CSV/JSONL plus "
                "<out>.provenance.json. A killed run resumes from <out>.partial.jsonl. "
                "--shards/--shard split the plan into parts that run anywhere (--ray: as Ray "
                "tasks) and merge into the same records.",
    add_arguments=_add_arguments,
    run=_run,
)
