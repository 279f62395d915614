#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# fmtrain-plot.py - draws `fmtrain train --csv FILE` as a PNG: the loss
# over the steps (top) and tokens/s with the data wait and checkpoint
# blocking per step (bottom).  A resumed run appends to its CSV, so a
# step may appear twice: the later line (the resumed run's) wins, and
# the steps it redid are marked.
#
#   tools/fmtrain-plot.py run.csv run.png
#
# Needs python3-matplotlib (Debian).  Exit 0 with the PNG written; 1 when
# the CSV cannot be read or has no steps; 2 on a usage error.
import csv
import sys

COLUMNS = ("step", "loss", "tok_per_s", "data_wait_ms", "ckpt_block_ms",
           "step_ms")


def read(path):
    steps, redone = {}, set()
    with open(path, newline="") as f:
        rows = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (rows.fieldnames or [])]
        if missing:
            raise ValueError("%s: not an fmtrain --csv file (no column %s)"
                             % (path, ", ".join(missing)))
        for n, row in enumerate(rows, 2):
            if row["step"] == "step":
                continue  # a header again (a resume appended)
            try:
                s = int(row["step"])
                v = {c: float(row[c]) for c in COLUMNS[1:]}
            except (TypeError, ValueError):
                raise ValueError("%s line %d: not a number" % (path, n))
            if s in steps:
                redone.add(s)
            steps[s] = v
    if not steps:
        raise ValueError("%s: no steps in it" % path)
    return steps, redone


def main(argv):
    if len(argv) != 3 or argv[1].startswith("-"):
        print("usage: fmtrain-plot.py RUN.csv OUT.png", file=sys.stderr)
        return 2
    try:
        steps, redone = read(argv[1])
    except (OSError, ValueError) as e:
        print("fmtrain-plot: %s" % e, file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("fmtrain-plot: needs matplotlib (apt-get install "
              "python3-matplotlib)", file=sys.stderr)
        return 1
    x = sorted(steps)
    col = {c: [steps[s][c] for s in x] for c in COLUMNS[1:]}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    top.plot(x, col["loss"], lw=1.2, color="tab:blue")
    if redone:
        r = sorted(redone)
        top.scatter(r, [steps[s]["loss"] for s in r], s=10, color="tab:red",
                    label="redone after a resume", zorder=3)
        top.legend(loc="upper right")
    top.set_ylabel("loss")
    top.set_title("fmtrain: %d steps (%s)" % (len(x), argv[1]))
    top.grid(alpha=0.3)
    bottom.plot(x, col["tok_per_s"], lw=1, color="tab:green",
                label="tokens/s")
    bottom.set_ylabel("tokens/s")
    bottom.grid(alpha=0.3)
    ms = bottom.twinx()
    ms.plot(x, col["data_wait_ms"], lw=0.8, color="tab:orange",
            label="data wait ms")
    ms.plot(x, col["ckpt_block_ms"], lw=0.8, color="tab:purple",
            label="checkpoint blocking ms")
    ms.set_ylabel("ms per step")
    lines = bottom.get_lines() + ms.get_lines()
    bottom.legend(lines, [l.get_label() for l in lines], loc="upper left",
                  fontsize="small")
    bottom.set_xlabel("step")
    fig.tight_layout()
    try:
        fig.savefig(argv[2], dpi=100)
    except OSError as e:
        print("fmtrain-plot: %s: %s" % (argv[2], e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
