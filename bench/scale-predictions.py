#!/usr/bin/env python3
"""The cost model's snake-over-horizontal speedup at GPT-65B and GPT-175B on
GreedySnake's machine, next to the paper's measured 1.96x and 2.53x.

For each model (bench/make_gpt_onnx.py --shapes-only: no weights, so the
graphs are made in seconds), each micro-batch size b and each number of
micro-batches M, it writes the model with a batch of M * b sequences and
runs spillwayc's planner on it twice (--report-json, nothing compiled):

  snake + overlap:  --schedule snake --overlap-optimizer 1   (GreedySnake)
  horizontal:       --schedule horizontal --overlap-optimizer 0   (ZeRO-Infinity)

both with --microbatches M, --place params=ssd,optimizer=ssd,gradients=ssd
(the planner places the activations), the same budgets (--gpu-mem, --host-mem)
and the hardware profile (profiles/greedysnake-a100.json). From the chosen
plan of each it takes the predicted iteration time, its bound and the bytes
per link, and computes tokens/s = M * b * S / iteration. The paper compares
*saturated* throughput (each system at the batch where its throughput stops
growing), so the headline is max tokens/s of snake over max tokens/s of
horizontal across the sweep, per model; the table also gives the ratio at
each (b, M).

Profile variants (--variants): "base" is the profile as committed; "ssd-x0.5"
and "ssd-x2" scale its SSD rates (the paper's SSD figures are not known here,
and the prediction depends on them); "bf16-compute" sets gpu.fp32_tflops to
the profile's bf16 rate, i.e. times the step as the paper's mixed-precision
training runs it (Spillway's cost model times its f32 step at the fp32 rate).

Writes bench/results/scale-predictions-<host>-<UTC time>.{json,md}; the
markdown has the table and the paragraph on the gap. --small runs the same
path on two small models with --graph-only weights (a sparse data file) and
small budgets: what works with a spillwayc that does not accept --shapes-only
models yet.

Environment: SPILLWAYC (default build/bin/spillwayc), BENCH_DIR (default
build/bench) for the generated models.
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The paper's configurations (GPT-3 shapes: 175B is GPT-3's 96 x 12288 with
# 96 heads; 65B the LLaMA-65B depth and width, 80 x 8192 with 64 heads) and
# its measured speedups over ZeRO-Infinity on one A100 (arXiv 2512.17570).
MODELS = {
    "65B": {"layers": 80, "d_model": 8192, "heads": 64, "paper_speedup": 1.96},
    "175B": {"layers": 96, "d_model": 12288, "heads": 96, "paper_speedup": 2.53},
}
SMALL = {
    "small-a": {"layers": 4, "d_model": 128, "heads": 4, "paper_speedup": None},
    "small-b": {"layers": 8, "d_model": 128, "heads": 4, "paper_speedup": None},
}
ORDERS = {
    "snake+overlap": ["--schedule", "snake", "--overlap-optimizer", "1"],
    "horizontal": ["--schedule", "horizontal", "--overlap-optimizer", "0"],
}
PLACE = "params=ssd,optimizer=ssd,gradients=ssd"


def variant_profile(base, name, tmp):
    """The profile file for variant `name` of `base` (a path)."""
    if name == "base":
        return base
    p = json.load(open(base))
    if name.startswith("ssd-x"):
        k = float(name[len("ssd-x"):])
        for d in p["ssd"]:
            for key in ("read_gbps", "write_gbps", "combined_gbps"):
                d[key] *= k
        note = f"SSD rates x{k:g}"
    elif name == "bf16-compute":
        p["gpu"]["fp32_tflops"] = p["gpu"]["bf16_tflops"]
        note = "gpu.fp32_tflops = gpu.bf16_tflops"
    else:
        raise SystemExit(f"scale-predictions.py: unknown variant '{name}' (base, ssd-xK, bf16-compute)")
    p["name"] += f"-{name}"
    p["source"] = f"bench/scale-predictions.py variant of {os.path.relpath(base, ROOT)}: {note}. " + p.get("source", "")
    path = os.path.join(tmp, f"{p['name']}.json")
    with open(path, "w") as f:
        json.dump(p, f, indent=1)
    return path


def make_model(out, spec, vocab, seq, batch, mode):
    if os.path.exists(os.path.join(out, "gpt.onnx")):
        return
    cmd = [sys.executable, os.path.join(ROOT, "bench", "make_gpt_onnx.py"), "--out", out,
           "--layers", str(spec["layers"]), "--d-model", str(spec["d_model"]), "--heads", str(spec["heads"]),
           "--vocab", str(vocab), "--seq", str(seq), "--batch", str(batch), mode]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def plan(spillwayc, model, profile, m, order, gpu_mem, host_mem, out_json, seq):
    # The causal mask is an S x S constant: past spillwayc's default limit
    # of 2^20 elements (S > 1024) it must be allowed explicitly.
    cmd = [spillwayc, model, "--hw", profile, "--report-json", out_json, "--microbatches", str(m),
           *ORDERS[order], "--place", PLACE, "--gpu-mem", gpu_mem, "--host-mem", host_mem,
           f"--max-inline-constant-elements={max(1 << 20, seq * seq)}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    row = {"command": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd),
           "exit": r.returncode}
    if os.path.exists(out_json):
        rep = json.load(open(out_json))
        c = rep["chosen"]
        row.update(fits=c["fits"], predicted_iteration_s=c["predicted_iteration_s"], bound=c["bound"],
                   time_s=c["time_s"], bytes_per_iteration=c["bytes_per_iteration"],
                   placement=c["placement"], peak_bytes=c["peak_bytes"], needed_bytes=c["needed_bytes"],
                   params=rep["summary"].get("params") if isinstance(rep.get("summary"), dict) else None)
    if r.returncode != 0:
        row["error"] = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--models", default="65B,175B", help="comma-separated, of %s (default: %%(default)s)" % ",".join(MODELS))
    ap.add_argument("--seq", type=int, default=2048, help="sequence length S (default: %(default)s, GPT-3's)")
    ap.add_argument("--vocab", type=int, default=50304, help="vocabulary (default: %(default)s)")
    ap.add_argument("--micro-batch", default="1,4", help="sequences per micro-batch b, comma-separated (default: %(default)s)")
    ap.add_argument("--microbatches", default="1,4,16,64", help="M values, comma-separated (default: %(default)s; horizontal saturates only at large M)")
    ap.add_argument("--profile", default=os.path.join(ROOT, "profiles", "greedysnake-a100.json"))
    ap.add_argument("--variants", default="base,ssd-x0.5,ssd-x2,bf16-compute",
                    help="profile variants, comma-separated (default: %(default)s)")
    ap.add_argument("--gpu-mem", default="80GiB", help="GPU budget (default: %(default)s, the A100's)")
    ap.add_argument("--host-mem", default="1024GiB", help="host budget (default: %(default)s, the profile's; snake with F = 1 keeps every deferred gradient slice, all of the gradients, on the host)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="spillwayc runs at once (default: %(default)s)")
    ap.add_argument("--small", action="store_true",
                    help="two small --graph-only models, small budgets (today's spillwayc)")
    ap.add_argument("-o", "--out", help="OUT.json (the .md beside it); default bench/results/scale-predictions-<host>-<time>.json")
    ap.add_argument("--markdown-from", metavar="OUT.json",
                    help="plan nothing: rewrite OUT.md from an earlier run's OUT.json (e.g. after editing this script's text)")
    a = ap.parse_args()
    if a.markdown_from:
        doc = json.load(open(a.markdown_from))
        with open(os.path.splitext(a.markdown_from)[0] + ".md", "w") as f:
            f.write(markdown(doc))
        print(f"wrote {os.path.splitext(a.markdown_from)[0]}.md")
        return 0

    spillwayc = os.environ.get("SPILLWAYC", os.path.join(ROOT, "build", "bin", "spillwayc"))
    if not os.access(spillwayc, os.X_OK):
        sys.exit(f"scale-predictions.py: no spillwayc at {spillwayc} (scripts/build.sh, or set SPILLWAYC)")
    models = SMALL if a.small else MODELS
    if a.small:
        a.seq, a.vocab, a.micro_batch, a.microbatches = 32, 512, "1,2", "1,2,4"
        a.gpu_mem, a.host_mem, a.variants = "256MiB", "1GiB", "base,ssd-x0.5"
        names = list(SMALL)
    else:
        names = a.models.split(",")
        for n in names:
            if n not in MODELS:
                sys.exit(f"scale-predictions.py: unknown model '{n}' (one of {', '.join(MODELS)})")
    bs = [int(x) for x in a.micro_batch.split(",")]
    ms = [int(x) for x in a.microbatches.split(",")]
    if min(bs + ms) < 1:
        sys.exit("scale-predictions.py: --micro-batch and --microbatches values must be >= 1")
    mode = "--graph-only" if a.small else "--shapes-only"
    bench = os.environ.get("BENCH_DIR", os.path.join(ROOT, "build", "bench"))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = a.out or os.path.join(ROOT, "bench", "results", f"scale-predictions-{platform.node()}-{stamp}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    tmp = tempfile.mkdtemp(prefix="scale-predictions.")
    variants = {v: variant_profile(a.profile, v, tmp) for v in a.variants.split(",")}
    jobs = []
    for n in names:
        for b in bs:
            for m in ms:
                d = os.path.join(bench, "scale", f"gpt-{n}-S{a.seq}-V{a.vocab}-B{m * b}{mode.replace('--', '-')}")
                make_model(d, models[n], a.vocab, a.seq, m * b, mode)
                for v, prof in variants.items():
                    for order in ORDERS:
                        jobs.append((n, b, m, v, order, os.path.join(d, "gpt.onnx"), prof,
                                     os.path.join(tmp, f"{n}-{b}-{m}-{v}-{order}.json")))
    print(f"scale-predictions.py: {len(jobs)} plans ({len(names)} models x {len(bs)} b x {len(ms)} M x "
          f"{len(variants)} profiles x 2 orders), {a.jobs} at once", file=sys.stderr)
    rows = []
    # Each plan as it comes, so an interrupted sweep keeps what it planned.
    partial = open(os.path.splitext(out)[0] + ".partial.jsonl", "w")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futs = {pool.submit(plan, spillwayc, j[5], j[6], j[2], j[4], a.gpu_mem, a.host_mem, j[7], a.seq): j for j in jobs}
        for f in concurrent.futures.as_completed(futs):
            n, b, m, v, order = futs[f][:5]
            r = f.result()
            r.update(model=n, micro_batch=b, microbatches=m, variant=v, order=order,
                     tokens_per_iteration=m * b * a.seq)
            if r.get("predicted_iteration_s") and r.get("fits"):
                r["tokens_per_s"] = r["tokens_per_iteration"] / r["predicted_iteration_s"]
            rows.append(r)
            partial.write(json.dumps(r) + "\n")
            partial.flush()
            print(f"  {n} b={b} M={m} {v} {order}: "
                  + (f"{r['predicted_iteration_s']:.4g} s ({r['bound']})" if "predicted_iteration_s" in r else r.get("error", "?")),
                  file=sys.stderr)
    rows.sort(key=lambda r: (names.index(r["model"]), list(variants).index(r["variant"]), r["micro_batch"],
                             r["microbatches"], list(ORDERS).index(r["order"])))
    summary = compare(rows, names, models, variants)
    doc = {"schema": "spillway-scale-predictions-1", "command": " ".join(["bench/scale-predictions.py", *sys.argv[1:]]),
           "when": stamp, "host": platform.node(), "spillwayc": spillwayc,
           "profile": os.path.relpath(a.profile, ROOT), "variants": {v: (json.load(open(p))) for v, p in variants.items()},
           "seq": a.seq, "vocab": a.vocab, "gpu_mem": a.gpu_mem, "host_mem": a.host_mem, "place": PLACE,
           "orders": {k: " ".join(v) for k, v in ORDERS.items()}, "model_specs": {n: models[n] for n in names},
           "summary": summary, "plans": rows}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    partial.close()
    os.remove(partial.name)
    md = markdown(doc)
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(md)
    print(md)
    print(f"summary: {out} and {os.path.splitext(out)[0]}.md")
    failed = [r for r in rows if "predicted_iteration_s" not in r]
    return 1 if failed and len(failed) == len(rows) else 0


def compare(rows, names, models, variants):
    """Per model, variant and micro-batch size b (and over all b): the
    saturated speedup (best tokens/s over M of each order) and the ratio at
    each (b, M)."""
    out = {}
    bs = sorted({r["micro_batch"] for r in rows})
    for n in names:
        for v in variants:
            for b in [None, *bs]:
                sel = [r for r in rows if r["model"] == n and r["variant"] == v and b in (None, r["micro_batch"])]
                best = {}
                for order in ORDERS:
                    fit = [r for r in sel if r["order"] == order and "tokens_per_s" in r]
                    best[order] = max(fit, key=lambda r: r["tokens_per_s"]) if fit else None
                at = {}
                for r in sel:
                    if r["order"] != "snake+overlap" or "tokens_per_s" not in r:
                        continue
                    h = next((x for x in sel if x["order"] == "horizontal" and x["micro_batch"] == r["micro_batch"]
                              and x["microbatches"] == r["microbatches"] and "tokens_per_s" in x), None)
                    if h:
                        at[f"b={r['micro_batch']},M={r['microbatches']}"] = r["tokens_per_s"] / h["tokens_per_s"]
                s, h = best["snake+overlap"], best["horizontal"]
                out[f"{n}/{v}/" + (f"b={b}" if b else "all")] = {
                    "model": n, "variant": v, "micro_batch": b or "all", "paper_speedup": models[n]["paper_speedup"],
                    "saturated_speedup": (s["tokens_per_s"] / h["tokens_per_s"]) if s and h else None,
                    "snake_best": {k: s[k] for k in ("micro_batch", "microbatches", "tokens_per_s", "bound")} if s else None,
                    "horizontal_best": {k: h[k] for k in ("micro_batch", "microbatches", "tokens_per_s", "bound")} if h else None,
                    "speedup_at_equal_batch": at}
    return out


def fmt_bytes(b):
    return f"{b / 1e9:.0f} GB" if b >= 1e9 else f"{b / 1e6:.1f} MB"


def markdown(doc):
    L = [f"# Snake + overlap over horizontal: the cost model vs GreedySnake's paper", "",
         f"`{doc['command']}` ({doc['when']}, {doc['host']}); profile `{doc['profile']}`; "
         f"S = {doc['seq']}, V = {doc['vocab']}; budgets GPU {doc['gpu_mem']}, host {doc['host_mem']}; "
         f"`--place {doc['place']}` (activations: the planner's choice); snake + overlap = "
         f"`{doc['orders']['snake+overlap']}`, horizontal = `{doc['orders']['horizontal']}`.", "",
         "Saturated speedup = the best predicted tokens/s of snake + overlap over the best of horizontal "
         "across the sweep of micro-batches M, at each micro-batch size b and over all b (the paper's "
         "metric: each system at the batch where its throughput saturates).", "",
         "| model | profile variant | b | predicted saturated speedup | paper | snake best (b, M, tokens/s, bound) | horizontal best (b, M, tokens/s, bound) |",
         "|---|---|---|---|---|---|---|"]
    for k, s in doc["summary"].items():
        def best(x):
            return f"b={x['micro_batch']}, M={x['microbatches']}, {x['tokens_per_s']:.3g}, {x['bound']}" if x else "none fits"
        sp = f"{s['saturated_speedup']:.2f}x" if s["saturated_speedup"] else "-"
        paper = f"{s['paper_speedup']:.2f}x" if s["paper_speedup"] else "-"
        L.append(f"| {s['model']} | {s['variant']} | {s['micro_batch']} | {sp} | {paper} | {best(s['snake_best'])} | {best(s['horizontal_best'])} |")
    L += ["", "Every plan (predicted s/iteration, bound, SSD bytes read + written per iteration):", "",
          "| model | variant | b | M | order | s/iter | bound | ssd read | ssd write | tokens/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["plans"]:
        if "predicted_iteration_s" in r:
            bpi = r["bytes_per_iteration"]
            tps = f"{r['tokens_per_s']:.3g}" if "tokens_per_s" in r else "over budget"
            L.append(f"| {r['model']} | {r['variant']} | {r['micro_batch']} | {r['microbatches']} | {r['order']} | "
                     f"{r['predicted_iteration_s']:.4g} | {r['bound']} | {fmt_bytes(bpi['ssd_read'])} | "
                     f"{fmt_bytes(bpi['ssd_write'])} | {tps} |")
        else:
            L.append(f"| {r['model']} | {r['variant']} | {r['micro_batch']} | {r['microbatches']} | {r['order']} | - | "
                     f"failed: {r.get('error', '?')} | | | |")
    L += ["", "## Why the prediction and the paper differ", "", GAP, ""]
    return "\n".join(L)


GAP = """\
The cost model (docs/cost-model.md) is a roofline: per iteration it counts the
FLOPs and the bytes each link carries for the order, M and placement, divides
each by the profile's rate, takes the largest as the iteration time and adds
only the optimizer work that cannot hide. What it models exactly is the
traffic that separates the two orders: horizontal loads every layer's
parameters twice per micro-batch and flushes every layer's gradient once per
micro-batch (an SSD read-modify-write of the accumulator), snake loads them
twice per iteration and flushes once, and the overlap F = 1 saves the
update's re-read of the parameters. So horizontal's SSD bytes per token stop
falling as M grows (a plateau set by the micro-batch size b: about 4 P of
SSD traffic per b S tokens), while snake's keep falling until compute (or the
activations' traffic) binds. The predicted saturated speedup is the ratio of
those two plateaus, and it swings with two numbers the paper's setup fixes
and this profile only guesses: the compute rate and the micro-batch size.
At the fp32 rate (19.5 TFLOP/s, what the model times Spillway's f32 step at)
a micro-batch of 4 x 2048 tokens already makes horizontal compute-bound, so
both orders reach the same compute roofline and the saturated speedup is
about 1; at b = 1 it is 3x and more. At the bf16 rate (the "bf16-compute"
variant, 312 TFLOP/s peak) horizontal stays SSD-bound at every b the sweep
has and the speedup is several times the paper's. The paper's 1.96x and 2.53x
lie between: its training runs at a bf16 rate well below the peak, at the
micro-batch sizes its GPU memory allowed.

What the model leaves out, each of which moves a prediction away from a
measurement: (1) Precision: Spillway trains fp32 parameters as their own
master weights (4 bytes of parameter and 4 of gradient per parameter, 8 of
AdamW state), where the paper's systems move fp16/bf16 parameters and
gradients (2 bytes) and keep fp32 master weights and moments with the
optimizer: the same byte ratios between the orders for the parameters, not
for the optimizer's share, and half the bytes per token. (2) Perfect
overlap: every resource is assumed to overlap every other with unlimited
look-ahead; real prefetch, ZeRO-Infinity's per-parameter partitioning and
its host-side gradient handling lose time it does not charge (a measured
horizontal saturates below its roofline, which raises a measured speedup),
and GreedySnake does not reach its roofline either (which lowers it). (3)
The CPU optimizer is one rate (parameters/s); its memory traffic and its
contention with the I/O threads are not counted, and the overlap's gain is
partly there. (4) The hardware rates are the A100 datasheet's peaks and
assumptions (the profile's "source" says which), not the paper's machine's:
the "ssd-x" variants show how the prediction moves with the SSD rate. (5)
The micro-batch size is limited here by the model's estimate of the GPU
working set against --gpu-mem, not by a real allocator, and the paper's
saturation points may lie at other (b, M) than the sweep's. (6) Activation
checkpoints go where the planner finds fastest within the budgets (GPU,
host or SSD) for both orders, where ZeRO-Infinity and GreedySnake each have
their own policy.
"""


if __name__ == "__main__":
    sys.exit(main())
