#!/usr/bin/env python3
"""Make the shipped CIFAR-10 ViT from the CPU recording: its weights in int8, with its numbers.

    python scripts/ship_cifar10_vit.py STATE --data cifar10.npz                  # into runs/
    python scripts/ship_cifar10_vit.py STATE --data cifar10.npz --write-assets   # the shipped one

STATE is the state folder of ``scripts/train_cifar10.py --plan cpu``: its ``results.json``
holds the finished run and ``weights/vit-cpu-seed0.safetensors`` its trained weights (fp32).
The script stores the weight matrices as 8-bit integers with a scale per row
(``vitbook.pretrained.checkpoints.quantize_int8``: a quarter of the size, small enough for a
web page), and measures what that costs: the int8 model's accuracy on the 10,000 test photos
of ``--data`` (the run's own test accuracy, in fp32, was read once at its end; this second
reading chooses nothing, it describes the file that ships) and on the 1,000 test photos of the
shipped sample. The file's metadata holds the run's row, seed, recipe, validation and test
accuracies, those measurements and the recording's provenance (machine, command, commit).

With ``--write-assets`` it writes ``vitbook/assets/cifar10_vit.safetensors`` (what
``vitbook.pretrained.load_cifar10_vit`` reads) and copies ``STATE/results.json`` to
``vitbook/assets/cifar10_cpu_results.json`` (what ``vitbook.studies.cpu_photos.load_results``
reads); by default both go to new files in ``runs/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vitbook import _files  # noqa: E402
from vitbook.data.cifar import CIFAR10_MEAN, CIFAR10_STD, Normalize, load_cifar10  # noqa: E402
from vitbook.data.cifar_sample import load_cifar10_sample  # noqa: E402
from vitbook.pretrained.checkpoints import CIFAR10_VIT_PATH, load_model, save_model  # noqa: E402
from vitbook.studies import cpu_photos, provenance  # noqa: E402
from vitbook.train import evaluate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("state", type=Path, help="the state folder of the CPU recording")
    parser.add_argument("--data", required=True, help="the .npz the run was recorded on")
    parser.add_argument("--write-assets", action="store_true",
                        help="write the shipped model and results in vitbook/assets")
    args = parser.parse_args(argv)
    row, seed = cpu_photos.ROW, 0
    weights = args.state / "weights" / f"{row}-seed{seed}.safetensors"
    model_out = CIFAR10_VIT_PATH if args.write_assets else _files.new_path(
        Path("runs"), "cifar10-vit", suffix=".safetensors")  # fmt: skip
    results_out = cpu_photos.RESULTS_PATH if args.write_assets else _files.new_path(
        Path("runs"), "cifar10-cpu-results")  # fmt: skip
    try:
        for out in (model_out, results_out):
            _files.check_output(out, write_assets=args.write_assets)
        results = cpu_photos.load_results(args.state / "results.json")
        runs = [r for r in results["runs"] if (r["row"], r["seed"]) == (row, seed)]
        if not runs:
            raise ValueError(f"{args.state / 'results.json'} holds no finished {row} seed {seed};"
                             " finish the recording first.")  # fmt: skip
        vit = load_model(weights)
        splits = load_cifar10(args.data)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: nothing written: {error}\n")
    run = runs[0]
    if splits.sha256 != results["provenance"][0]["data"]["sha256"]:
        parser.exit(2, f"{parser.prog}: {args.data} is not the data the run was recorded on "
                       "(its checksum differs); pass that file.\n")  # fmt: skip
    fp32 = torch.nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), vit).eval()
    _, _, x_sample, y_sample = load_cifar10_sample()
    # The file that ships holds int8 weights: measure the model such a file holds, read back.
    probe = _files.check_output(_files.new_path(Path("runs"), "cifar10-vit-int8",
                                                suffix=".safetensors"))  # fmt: skip
    save_model(vit, probe, int8=True)
    int8 = torch.nn.Sequential(Normalize(CIFAR10_MEAN, CIFAR10_STD), load_model(probe)).eval()
    probe.unlink()
    cifar10 = vit.config.num_classes == 10  # a smoke run on the stand-in has 3 classes
    measured = {
        "test_accuracy_fp32_recorded": run["test_accuracy"],
        "test_accuracy_int8": evaluate(int8, splits.test, precision="fp32"),
        "sample_test_accuracy_int8": evaluate(int8, (x_sample, y_sample), precision="fp32")
        if cifar10 else None,
        "sample_test_accuracy_fp32": evaluate(fp32, (x_sample, y_sample), precision="fp32")
        if cifar10 else None,
    }  # fmt: skip
    first = results["provenance"][0]
    metadata = {
        "row": row, "seed": str(seed), "recipe": json.dumps(run["recipe"]),
        "validation_accuracy": str(run["final_val_accuracy"]),
        "test_accuracy": str(measured["test_accuracy_int8"]),
        "measured": json.dumps(measured),
        "normalize": json.dumps({"mean": CIFAR10_MEAN, "std": CIFAR10_STD}),
        "data": json.dumps(first["data"]),
        "recorded_on": json.dumps({k: first.get(k) for k in (
            "device", "cpu_capability", "cpu_matrix_features", "torch_threads", "torch",
            "git_commit", "command")}),
        "made_by": json.dumps({"command": provenance.command(), "date": provenance.now(),
                               "git_commit": provenance.git("rev-parse", "HEAD",
                                                           where=Path(__file__).parent)}),
    }  # fmt: skip
    save_model(vit, model_out, int8=True, **metadata)  # the same int8 values, now with the numbers
    shipped = load_model(model_out)
    if any(not torch.equal(a, b) for a, b in zip(shipped.state_dict().values(),
                                                 int8[1].state_dict().values(), strict=True)):
        parser.exit(2, f"{parser.prog}: the model written differs from the one measured\n")
    _files.write_json(results_out, results)
    print(f"wrote {model_out} ({model_out.stat().st_size / 1e6:.2f} MB) and {results_out}")
    for key, value in measured.items():
        print(f"  {key}: {'not measured' if value is None else f'{value:.4f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
