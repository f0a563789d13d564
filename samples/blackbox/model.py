#!/usr/bin/env python3
"""A sample black box for `gradcalc --exec` (README.md, "Black boxes"), standard library only.

    f(x, y)  = y * sum(sin(x)) + sum(x^2) + log1p(y^2)      x: any shape, y: a scalar
    df/dx    = y * cos(x) + 2 x
    df/dy    = sum(sin(x)) + 2 y / (1 + y^2)

It reads one request {"schema": 1, "points": [{"x": ..., "y": ...}, ...]} on
stdin and prints {"results": [{"value": f, "gradient": {"x": ..., "y": ...}}, ...]}.
samples/blackbox/model.grad is the same function in gradcalc's language.

Flags, to see checks fail:
  --wrong-gradient   report the gradient scaled by 1.01 (1% off)
  --no-gradient      report values only
"""
import argparse
import json
import math
import sys


def decode(v):
    """JSON data -> float or nested list of floats; "nan", "inf", "-inf" become numbers."""
    return [decode(i) for i in v] if isinstance(v, list) else float(v)


def encode(v):
    """float or nested list -> JSON data, non-finite numbers as "nan", "inf", "-inf"."""
    if isinstance(v, list):
        return [encode(i) for i in v]
    return v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf" if v > 0 else "-inf")


def elementwise(fn, x):
    return [elementwise(fn, i) for i in x] if isinstance(x, list) else fn(x)


def total(x):
    return math.fsum(total(i) for i in x) if isinstance(x, list) else x


def safe(fn):
    """fn, with inf - inf and the like giving nan rather than an exception (as in C)."""
    def wrapped(*args):
        try:
            return fn(*args)
        except (ValueError, ZeroDivisionError):
            return math.nan
        except OverflowError:
            return math.inf
    return wrapped


@safe
def f(x, y):
    return y * total(elementwise(safe(math.sin), x)) + total(elementwise(lambda t: t * t, x)) \
        + math.log1p(y * y)


def gradient(x, y, scale):
    dx = elementwise(safe(lambda t: scale * (y * math.cos(t) + 2 * t)), x)
    dy = safe(lambda: scale * (total(elementwise(safe(math.sin), x)) + 2 * y / (1 + y * y)))()
    return {"x": dx, "y": dy}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wrong-gradient", action="store_true", help="scale the gradient by 1.01")
    parser.add_argument("--no-gradient", action="store_true", help="report values only")
    args = parser.parse_args(argv)
    request = json.load(sys.stdin)
    if request.get("schema") != 1:
        print(f"model.py: unsupported request schema {request.get('schema')!r}", file=sys.stderr)
        return 2
    results = []
    for i, point in enumerate(request["points"]):
        missing = sorted({"x", "y"} - set(point))
        if missing:
            print(f"model.py: point {i} has no value for {', '.join(missing)}", file=sys.stderr)
            return 2
        x, y = decode(point["x"]), decode(point["y"])
        if isinstance(y, list):
            print("model.py: y must be a scalar", file=sys.stderr)
            return 2
        result = {"value": encode(f(x, y))}
        if not args.no_gradient:
            scale = 1.01 if args.wrong_gradient else 1.0
            result["gradient"] = {k: encode(g) for k, g in gradient(x, y, scale).items()}
        results.append(result)
    json.dump({"results": results}, sys.stdout)  # floats as repr: full precision
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
