"""Where a step's time goes, from a sharc Chrome trace (runtime/trace.h):
gpt2_main --trace, bench_gpt2_gpu --trace (the GPU's device clock), or any
program's world.trace(). Prints the statements grouped by kind and model
line, longest first, with their share of the step; --svg draws the step as
a timeline, one bar per statement coloured by its kind.

    python3 bench/trace_summary.py TRACE.json [--top 15] [--svg step.svg]
"""
import argparse
import collections
import json
import sys

PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def load(path):
    with open(path) as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    if not events:
        sys.exit(f"trace_summary: {path} holds no statements (was the clock on?)")
    return trace.get("otherData", {}).get("clock", "?"), events


def kind_of(event):
    """'reduce  dsl/transformer.cpp:197 h/ln1' -> ('reduce', 'dsl/transformer.cpp:197')."""
    op, _, rest = event["name"].partition("  ")
    return op, rest.split(" ")[0] if rest else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--svg")
    args = ap.parse_args()
    clock, events = load(args.trace)
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    step_us = end - start
    groups = collections.defaultdict(lambda: [0.0, 0])
    kinds = collections.Counter()
    for e in events:
        op, line = kind_of(e)
        groups[(op, line)][0] += e["dur"]
        groups[(op, line)][1] += 1
        kinds[op] += e["dur"]
    print(f"{args.trace}: {len(events)} statements, {step_us / 1e3:.2f} ms on the {clock} clock")
    print(f"{'ms':>9} {'share':>6} {'count':>5}  statement")
    for (op, line), (us, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{us / 1e3:9.2f} {100 * us / step_us:5.1f}% {n:5d}  {op}  {line}")
    if args.svg:
        colour = {op: PALETTE[i] for i, (op, _) in enumerate(kinds.most_common(len(PALETTE)))}
        width, bar_h = 960, 40
        scale = width / step_us
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{bar_h + 30 + 18 * len(colour)}" '
                 f'font-family="sans-serif" font-size="12">',
                 f'<rect x="0" y="0" width="{width}" height="{bar_h}" fill="#eeeeee"/>']
        for e in events:
            op, _ = kind_of(e)
            parts.append(f'<rect x="{(e["ts"] - start) * scale:.2f}" y="0" width="{max(e["dur"] * scale, 0.2):.2f}" '
                         f'height="{bar_h}" fill="{colour.get(op, "#999999")}"/>')
        parts.append(f'<text x="0" y="{bar_h + 16}">one step, {step_us / 1e3:.1f} ms ({clock} clock); '
                     f'grey: every other kind</text>')
        for i, op in enumerate(colour):
            y = bar_h + 34 + 18 * i
            parts.append(f'<rect x="0" y="{y - 10}" width="12" height="12" fill="{colour[op]}"/>')
            parts.append(f'<text x="18" y="{y}">{op}: {kinds[op] / 1e3:.1f} ms '
                         f'({100 * kinds[op] / step_us:.0f}%)</text>')
        parts.append("</svg>")
        with open(args.svg, "w") as f:
            f.write("\n".join(parts) + "\n")
        print(f"timeline -> {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
