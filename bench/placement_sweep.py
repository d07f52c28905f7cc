#!/usr/bin/env python3
"""Placement by layer against whole classes, over the host budget.

Reads the rows test/e2e/placement_sweep.py wrote (--json: per host budget,
the split plan and the whole-class plan: exact arenas, SSD bytes per
iteration, the cost model's predicted iteration time), draws them as an SVG
(predicted SSD bytes per iteration and predicted iteration time against
--host-mem, both placements), and, at the budgets of --measure, compiles
both plans' executables, trains --steps steps on the CPU device and
records the measured seconds per iteration next to the prediction and the
measured SSD bytes per iteration next to the plan's.

Writes OUT.json (the rows and the measurements) and OUT.svg; prints a
table of the measurements and the split plan's SSD bytes against the
whole-class plan's at each measured budget.
"""

import argparse
import json
import os
import subprocess
import sys

MIB = 1 << 20


def svg_plot(rows, path, title):
    """Two panels, SSD bytes and predicted time, split and whole."""
    split = sorted((r for r in rows if r["split"]), key=lambda r: r["host_budget"])
    whole = sorted((r for r in rows if not r["split"]), key=lambda r: r["host_budget"])
    xs = [r["host_budget"] / MIB for r in split]
    if not xs:
        sys.exit("placement_sweep.py: no rows to plot")
    W, H, M = 760, 300, 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" '
           f'height="{2 * H + 40}" font-family="sans-serif" font-size="12">',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">'
           f'{title}</text>']

    def panel(y0, series, label, unit, scale):
        ymax = max((v for _, pts in series for _, v in pts), default=1) or 1
        x0, x1 = min(xs), max(xs)
        span = (x1 - x0) or 1

        def px(x):
            return M + (x - x0) / span * (W - 2 * M)

        def py(v):
            return y0 + H - M / 2 - v / ymax * (H - M)
        out.append(f'<rect x="{M}" y="{y0 + M / 2}" width="{W - 2 * M}" '
                   f'height="{H - M}" fill="none" stroke="#999"/>')
        out.append(f'<text x="{M}" y="{y0 + M / 2 - 6}">{label} '
                   f'(max {ymax / scale:.3g} {unit})</text>')
        for i in range(5):
            x = x0 + span * i / 4
            out.append(f'<text x="{px(x):.1f}" y="{y0 + H - 10}" '
                       f'text-anchor="middle">{x:.0f} MiB</text>')
        colors = {"by layer": "#1f77b4", "whole classes": "#d62728"}
        for k, (name, pts) in enumerate(series):
            d = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(v):.1f}"
                         for i, (x, v) in enumerate(pts))
            out.append(f'<path d="{d}" fill="none" stroke="{colors[name]}" '
                       f'stroke-width="2"/>')
            out.append(f'<text x="{W - M - 110}" y="{y0 + M / 2 + 16 + 14 * k}" '
                       f'fill="{colors[name]}">{name}</text>')

    def pts(rs, key):
        return [(r["host_budget"] / MIB, key(r)) for r in rs
                if key(r) is not None]
    panel(30, [("by layer", pts(split, lambda r: r["ssd_read"] + r["ssd_write"])),
               ("whole classes", pts(whole, lambda r: r["ssd_read"] + r["ssd_write"]))],
          "predicted SSD bytes per iteration (read + written)", "MB", 1e6)
    panel(30 + H, [("by layer", pts(split, lambda r: r["predicted_s"])),
                   ("whole classes", pts(whole, lambda r: r["predicted_s"]))],
          "predicted iteration time", "s", 1)
    out.append(f'<text x="{W / 2}" y="{2 * H + 34}" text-anchor="middle">'
               f'--host-mem</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        sys.exit(f"placement_sweep.py: failed: {' '.join(cmd)}\n"
                 f"{r.stderr[-3000:]}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("rows", help="placement_sweep.py --json output")
    ap.add_argument("--out", required=True, help="OUT: writes OUT.json, OUT.svg")
    ap.add_argument("--title", default="placement by layer vs whole classes")
    ap.add_argument("--measure", default="",
                    help="host budgets in MiB to train at, comma-separated")
    ap.add_argument("--spillwayc")
    ap.add_argument("--model")
    ap.add_argument("--hw")
    ap.add_argument("--gpu-mem", type=int)
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--ssd", help="swap directory for the executables")
    ap.add_argument("--work", help="scratch directory")
    a = ap.parse_args()
    rows = json.load(open(a.rows))
    svg_plot(rows, a.out + ".svg", a.title)
    measured = []
    budgets = [float(x) for x in a.measure.split(",") if x]
    if budgets and not all([a.spillwayc, a.model, a.hw, a.gpu_mem, a.ssd,
                            a.work]):
        ap.error("--measure needs --spillwayc, --model, --hw, --gpu-mem, "
                 "--ssd and --work")
    mdir = os.path.dirname(os.path.abspath(a.model or "."))
    data = ["--input", f"tokens={mdir}/tokens.npy",
            "--input", f"targets={mdir}/targets.npy"]
    for mib in budgets:
        host = int(mib * MIB)
        for split in ("on", "off"):
            exe = os.path.join(a.work, f"exe-{host}-{split}")
            r = run([a.spillwayc, a.model, "-o", exe, "--hw", a.hw,
                     "--gpu-mem", str(a.gpu_mem), "--host-mem", str(host),
                     "--microbatches", str(a.microbatches),
                     "--split-placement", split, "-v"])
            placed = [ln.split("offload plan: ", 1)[1] for ln in
                      r.stderr.splitlines() if "offload plan: " in ln]
            stats = exe + ".stats.json"
            run([exe, *data, "--steps", str(a.steps), "--ssd", a.ssd,
                 "--stats-json", stats])
            s = json.load(open(stats))
            # The first step warms the page cache and the pools: the rest.
            per = [t["seconds"] for t in s["telemetry_per_step"]][1:] or \
                [s["seconds_per_iteration"]]
            m = {"host_budget": host, "split": split == "on",
                 "placement": placed[0] if placed else "",
                 "measured_s": sum(per) / len(per),
                 "predicted_s": (s.get("predicted") or {}).get("seconds_per_iteration"),
                 "bytes_per_iteration": s["bytes_per_iteration"],
                 "planned_bytes_per_iteration":
                     s["predicted_bytes_per_iteration"]}
            measured.append(m)
            for f in (exe, exe + ".weights", stats):
                if os.path.exists(f):
                    os.remove(f)
    with open(a.out + ".json", "w") as f:
        json.dump({"rows": rows, "measured": measured}, f, indent=1)
    if measured:
        print("host_MiB\tplacement\tmeasured_s\tpredicted_s\t"
              "ssd_read\tssd_write\tplanned_read\tplanned_write")
        for m in measured:
            b, p = m["bytes_per_iteration"], m["planned_bytes_per_iteration"]
            pred = m["predicted_s"]
            print(f"{m['host_budget'] / MIB:g}\t"
                  f"{'by layer' if m['split'] else 'whole'}\t"
                  f"{m['measured_s']:.3f}\t"
                  f"{'-' if pred is None else f'{pred:.3f}'}\t"
                  f"{b['ssd_read']}\t{b['ssd_write']}\t{p['ssd_read']}\t"
                  f"{p['ssd_write']}")
        for mib in budgets:
            host = int(mib * MIB)
            sp = next(m for m in measured if m["host_budget"] == host and m["split"])
            wh = next(m for m in measured if m["host_budget"] == host and not m["split"])
            ssd = lambda m: (m["bytes_per_iteration"]["ssd_read"] +
                             m["bytes_per_iteration"]["ssd_write"])
            ratio = ssd(sp) / ssd(wh) if ssd(wh) else float("nan")
            print(f"host {mib:g} MiB: by layer moves {ratio:.2f}x the whole-"
                  f"class plan's SSD bytes, {sp['measured_s'] / wh['measured_s']:.2f}x "
                  f"its measured time per iteration")
    print(f"wrote {a.out}.json and {a.out}.svg")


if __name__ == "__main__":
    main()
