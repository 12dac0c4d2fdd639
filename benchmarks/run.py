#!/usr/bin/env python3
"""Run vitbook's benchmarks, print their tables as Markdown, and optionally save them as JSON.

    python benchmarks/run.py [--quick] [--json PATH] [--markdown PATH]
                             [--only speed,limit,memory,threads,budget,gpu]

Sections (all by default, in this order):
    speed   vitbook sdpa / explicit vs the nn.TransformerEncoderLayer reference, as ratios
    limit   ViT-B/16 inference MACs/s as a fraction of the machine's large-matmul throughput,
            and the top operators of a profiled forward pass
    memory  peak memory of a ViT-B/16 inference forward pass at batch 8, both attention impls
    threads one torch thread against two for the book's tiny models, idle and with a core busy
    photos_cpu  the CPU recording's photo ViT: each change to its training step (threads, batch,
            bf16, the attention path, torch.compile, uint8 data) against the plain step
    budget  every notebook of _toc.yml against its 30 s target (alone and in the full strict
            build), and the wall time of the test command
    gpu     fit against a plain training loop, and vitbook's ViT-B/16 against timm's, on CUDA
            when there is a GPU (bf16 or fp16), else on the CPU (only --only gpu runs it there)

``--quick`` swaps in toy models and skips the book build: it checks that the scripts work (the
smoke test in tests/test_benchmarks.py runs it), its numbers mean nothing. torch runs on 2 threads.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import THREADS, Table, machine, set_threads  # noqa: E402

# Each section is imported when it runs, so that one runs where only its packages are installed
# (budget needs the book's: nbformat, nbclient, yaml; gpu needs torch, and timm for one table).
SECTIONS = ("speed", "limit", "memory", "threads", "photos_cpu", "budget", "gpu")


def section(name: str) -> Callable[..., list[Table]]:
    """The ``run`` function of ``benchmarks/<name>.py``."""
    return importlib.import_module(f"benchmarks.{name}").run


def default_sections() -> list[str]:
    """Every section; the gpu section only where CUDA is (on a CPU it trains for hours)."""
    import torch

    return [name for name in SECTIONS if name != "gpu" or torch.cuda.is_available()]


def run_benchmarks(sections: list[str], *, quick: bool = False, echo: bool = True) -> dict:
    """Run the named sections and return the report: machine, settings, tables, timings.

    With ``echo``, each table is printed as soon as its section finishes.
    """
    unknown = [name for name in sections if name not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}.")
    set_threads(THREADS)
    report = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "machine": machine(),
        "section_seconds": {},
        "tables": [],
    }
    if echo:
        print(machine_line(report["machine"]) + "\n", flush=True)
    start = time.perf_counter()
    for name in sections:
        section_start = time.perf_counter()
        tables = section(name)(quick=quick)
        report["section_seconds"][name] = time.perf_counter() - section_start
        report["tables"].extend(tables)
        if echo:
            for table in tables:
                print(table.to_markdown() + "\n", flush=True)
            print(f"({name}: {report['section_seconds'][name]:.0f} s)\n", flush=True)
    report["total_seconds"] = time.perf_counter() - start
    if echo:
        print(f"Total: {report['total_seconds']:.0f} s", flush=True)
    return report


def machine_line(info: dict) -> str:
    return (
        f"Machine: {info['cpu_model']}, {info['cores']} cores, {info['memory_gib']} GiB, "
        f"CPU capability {info['cpu_capability']}; torch {info['torch']} on "
        f"{info['torch_threads']} threads; Python {info['python']}."
    )


def report_markdown(report: dict) -> str:
    """The report as benchmarks/RESULTS.md's Performance section: machine, command, timings,
    tables."""
    seconds = ", ".join(f"{name} {s:.0f} s" for name, s in report["section_seconds"].items())
    lines = [
        "## Performance",
        "",
        f"Measured on {report['started'][:10]} by `benchmarks/run.py`. Reproduce with "
        "`python3 tasks.py bench` (which runs `benchmarks/run.py` inside `.venv`), or directly "
        "with `.venv/bin/python benchmarks/run.py`; `benchmarks/README.md` says how the numbers "
        "are taken.",
        "",
        f"- {machine_line(report['machine'])} (CPU model from /proc/cpuinfo.)",
        f"- Run time of the whole benchmark: {report['total_seconds']:.0f} s ({seconds}).",
        "- Ratios are vitbook time / reference time of medians taken side by side in one process: "
        "below 1 is faster than PyTorch's `nn.TransformerEncoderLayer`.",
        "",
    ]
    summary = summary_lines(report["tables"])
    if summary:
        lines += ["In short:", "", *summary, ""]
    for table in report["tables"]:
        lines += [table.to_markdown(), ""]
    return "\n".join(lines)


def summary_lines(tables: list[Table]) -> list[str]:
    """One bullet per section, with its target and whether it was met."""
    by_key = {table.key: table for table in tables}
    lines = []
    if "speed" in by_key:
        speed = by_key["speed"]
        sdpa, explicit = speed.column("sdpa / ref"), speed.column("explicit / ref")
        verdict = (
            "met in every row"
            if not speed.data["missed"]
            else "missed in " + "; ".join(speed.data["missed"])
        )
        lines.append(
            f"- Speed: vitbook sdpa / reference = {min(sdpa):.2f} to {max(sdpa):.2f} "
            f"(target <= {speed.data['target']}: {verdict}); the explicit path costs "
            f"{min(explicit):.2f} to {max(explicit):.2f} times the reference."
        )
    if "limit" in by_key:
        limit = by_key["limit"]
        fraction = limit.data["fraction"]["vitbook sdpa"]
        verdict = "met" if fraction >= limit.data["target"] else "missed"
        lines.append(
            f"- Limit: vitbook sdpa reaches {fraction:.2f} of the machine's matmul throughput "
            f"(target >= {limit.data['target']}: {verdict}); "
            f"{limit.data['share_in_mac_ops']:.0%} of its time is in the operators that do the "
            f"multiply-accumulates, running at {limit.data['mac_ops_fraction_of_limit']:.2f} of "
            "the matmul rate."
        )
    if "memory" in by_key:
        memory = by_key["memory"]
        parts = [
            f"{model} {tensors:.0f} MiB of tensors ({rss:.0f} MiB peak RSS increase)"
            for model, tensors, rss in zip(
                memory.column("model"),
                memory.column("torch allocator peak"),
                memory.column("peak RSS increase (median)"),
                strict=True,
            )
        ]
        lines.append("- Memory at the peak of one forward pass: " + ", ".join(parts) + ".")
    if "gpu-fit" in by_key:
        fit = by_key["gpu-fit"].data
        text = (
            f"- Training loop on {fit['device']} ({fit['precision']}): one epoch of `fit` takes "
            f"{fit['ratio']:.3f} times a plain loop's (target <= {fit['target']}: "
            f"{'met' if fit['met'] else 'missed'}; ratio spread {fit['ratio_spread']:.0%})"
        )
        if fit.get("compiled_ratio") is not None:
            met = "met" if fit["compiled_ratio"] <= fit["compiled_target"] else "missed"
            text += (
                f"; `fit(compile=True)` {fit['compiled_ratio']:.3f} times (target <= "
                f"{fit['compiled_target']}: {met})"
            )
        lines.append(text + ".")
    if by_key.get("gpu-timm") and by_key["gpu-timm"].rows:
        timm = by_key["gpu-timm"].data
        parts = ", ".join(f"{mode} {ratio:.3f}" for mode, ratio in timm["ratios"].items())
        lines.append(f"- ViT-B/16 training step on {timm['device']}, vitbook / timm: {parts}.")
    if "budget" in by_key:
        budget = by_key["budget"]
        notebooks = {name: r for name, r in budget.data["notebooks"].items() if r is not None}
        slowest = max(notebooks.items(), key=lambda item: item[1]["seconds"], default=None)
        failed = [name for name, result in notebooks.items() if result["error"]]
        over = [
            page.strip("`")
            for page, within in zip(
                budget.column("page"), budget.column("within target"), strict=True
            )
            if within is False
        ]
        target = budget.data.get("target_s", budget.data["budget_s"])
        text = f"- Book: {len(notebooks)} notebooks"
        if slowest:
            text += f", the slowest `{slowest[0]}` at {slowest[1]['seconds']:.0f} s alone"
        in_build = (budget.data["build"] or {}).get("notebook_seconds", {})
        if in_build:
            name, seconds = max(in_build.items(), key=lambda item: item[1])
            text += f" and `{name}` at {seconds:.0f} s in the build"
        text += f" (target {target:.0f} s); over target: {', '.join(over) or 'none'}"
        text += f"; failed: {', '.join(failed) or 'none'}"
        build = budget.data["build"]
        if build:
            state = "built" if build["returncode"] == 0 else "FAILED"
            text += f"; full strict build {build['seconds']:.0f} s ({state})"
        tests = budget.data.get("tests")
        if tests:
            state = "passed" if tests["returncode"] == 0 else "FAILED"
            text += f"; test command {tests['seconds'] / 60:.1f} min ({state})"
        busy = budget.data.get("tests_with_a_busy_core")
        if busy:
            state = "passed" if busy["returncode"] == 0 else "FAILED"
            text += f", with one core kept busy {busy['seconds'] / 60:.1f} min ({state})"
        lines.append(text + ".")
    if "threads" in by_key:
        threads = by_key["threads"]
        ratios = {}
        for machine, ratio in zip(threads.column("machine"), threads.column("2 / 1"), strict=True):
            ratios.setdefault(machine, []).append(ratio)
        parts = [
            f"{machine} {min(values):.2f} to {max(values):.2f}"
            for machine, values in ratios.items()
        ]
        lines.append(
            "- Threads for the book's tiny models, time with 2 threads / time with 1 thread: "
            + ", ".join(parts)
            + " (above 1: one thread is faster)."
        )
    return lines


def to_json(report: dict) -> str:
    return json.dumps(
        {**report, "tables": [table.to_dict() for table in report["tables"]]}, indent=1
    )


def from_json(text: str) -> dict:
    report = json.loads(text)
    return {**report, "tables": [Table.from_dict(table) for table in report["tables"]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes, no book build")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the report here")
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="PATH",
        help="also write the Performance section (as benchmarks/RESULTS.md holds it)",
    )
    parser.add_argument(
        "--only",
        default=",".join(default_sections()),
        metavar="SECTIONS",
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all; gpu only on a GPU)",
    )
    args = parser.parse_args(argv)
    sections = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in sections if name not in SECTIONS]
    if unknown or not sections:
        parser.error(f"--only takes a comma-separated subset of {','.join(SECTIONS)}")
    report = run_benchmarks(sections, quick=args.quick)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(to_json(report) + "\n", encoding="utf-8")
        print(f"JSON report: {args.json}", flush=True)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report_markdown(report), encoding="utf-8")
        print(f"Markdown report: {args.markdown}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
