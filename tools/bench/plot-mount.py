#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# plot-mount.py - draw the results of tools/bench/bench-mount.sh as one PNG
# for the README: four panels (sequential MiB/s cold / warm / re-read,
# random 8 KiB IOPS, `ls -l` of 10k objects, 1000 small files), one bar
# per system, medians over rounds with the min-max range as an error bar.
# A system that did not run gets its reason written in place of its bars.
#
#   plot-mount.py RESULTS.json OUT.png
#
# Needs matplotlib (Debian: python3-matplotlib); bench-mount.sh runs this
# with whichever of python3, /usr/bin/python3 has it.

import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"fmfs": "#1b9e77", "s3fs": "#d95f02", "rclone": "#7570b3",
           "local": "#666666", "curl": "#e6ab02", "aws": "#a6761d"}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot-mount.py RESULTS.json OUT.png")
    doc = json.load(open(sys.argv[1]))
    summ = doc["summary"]
    unavailable = doc.get("unavailable", {})
    systems = doc["systems"]

    def cell(s, m):
        x = summ.get(s, {}).get(m)
        if not x:
            return None
        return x["median"], x["min"], x["max"]

    fig, axes = plt.subplots(1, 4, figsize=(16, 4.6),
                             gridspec_kw={"width_ratios": [2.4, 1, 1, 1]})

    # Panel 1: sequential reads, grouped by measurement; in each group
    # only the systems that have a figure for it, side by side. Log scale:
    # a re-read from the page cache is ~10x anything that goes to FUSE.
    ax = axes[0]
    groups = [("cold", "cold\n(empty cache)"),
              ("warm", "warm\n(disk cache, page\ncache dropped)"),
              ("reread", "re-read\n(page cache kept)")]
    order = ["curl", "local"] + systems
    width = 0.8 / len(order)
    seen = set()
    for g, (m, _) in enumerate(groups):
        present = [s for s in order if cell(s, m)]
        for j, s in enumerate(present):
            med, lo, hi = cell(s, m)
            x = g + (j - (len(present) - 1) / 2) * width
            ax.bar(x, med, width, yerr=[[med - lo], [hi - med]], capsize=2,
                   color=COLOURS.get(s, "#999999"),
                   label=None if s in seen else s)
            ax.text(x, hi, "%.0f" % med, ha="center", va="bottom",
                    fontsize=6, rotation=90)
            seen.add(s)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([t for _, t in groups], fontsize=8)
    ax.set_ylabel("MiB/s, 8 x 64 MiB at once (log scale)")
    ax.set_title("sequential read")
    ax.legend(fontsize=8, loc="upper left")

    def single(ax, measure, title, ylabel, rows, lower_better):
        names, ys, lo, hi, cols = [], [], [], [], []
        for s in rows:
            c = cell(s, measure)
            if c:
                names.append(s)
                ys.append(c[0])
                lo.append(c[0] - c[1])
                hi.append(c[2] - c[0])
                cols.append(COLOURS.get(s, "#999999"))
        ax.bar(range(len(names)), ys, yerr=[lo, hi], capsize=2, color=cols)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        ax.set_title(title + (" (lower is better)" if lower_better else ""),
                     fontsize=10)
        ax.set_ylabel(ylabel)
        for i, y in enumerate(ys):
            ax.text(i, y + hi[i], ("%.2f" if lower_better else "%.0f") % y,
                    ha="center", va="bottom", fontsize=7)
        ax.margins(y=0.1)

    single(axes[1], "randread", "random 8 KiB reads", "IOPS (fio, 4 jobs)",
           ["local"] + systems, False)
    single(axes[2], "ls", "ls -l of 10k objects", "seconds",
           ["aws", "local"] + systems, True)
    single(axes[3], "small", "1000 x 4 KiB files", "seconds",
           ["local"] + systems, True)

    notes = ["%s: %s" % (s, why) for s, why in unavailable.items()]
    title = ("fmfs read path vs s3fs, rclone and the local disk - Ceph RGW "
             "on loopback, median of %d round(s)" % doc["rounds"])
    fig.suptitle(title, fontsize=11)
    if notes:
        fig.text(0.5, 0.005, "; ".join(notes), ha="center", fontsize=9,
                 color="#b00000")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
