"""Long fuzzing run for `make fuzz`: the generators and oracle of tests/test_fuzz.py, many examples.

    .venv/bin/python tests/fuzz_long.py --examples 20000 [--seed 0] [--memory-mb 4096]

Prints the number of examples run and of unexpected outcomes (any exception other than
GradcalcError, exit 3, a traceback, a leaked warning, broken JSON, a timeout), lists each
distinct failure once with its first input, and exits 1 if there was any.  Failures that
match a bug already pinned by an xfail test (test_fuzz.KNOWN_BUGS) are counted too, and
labelled as known.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import time
import warnings
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
warnings.filterwarnings("ignore", category=DeprecationWarning)  # typer's import of click, at start-up

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import test_fuzz as F  # noqa: E402

#: Share of the examples per generator.
SHARES = {"tokens": 0.25, "grammar": 0.25, "mutations": 0.25, "text": 0.10, "bytes": 0.075, "values": 0.075}


def run_generator(name: str, examples: int, seed: int, tally: F.Tally, counts: Counter) -> None:
    """Run `examples` examples of one generator through hypothesis, recording every failure."""
    opts = settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                    suppress_health_check=list(HealthCheck))

    def record(text, fn, *args, **kwargs):
        counts[name] += 1
        tally.examples += 1
        try:
            fn(*args, **kwargs)
        except F.Unexpected as u:
            tally.failures.append((name, u))

    if name == "bytes":
        @opts
        @hypothesis_seed(seed)
        @given(data=F.random_bytes, s=F.seeds)
        def body(data, s):
            record(data, F.exercise, data, s, stdin=True)
    elif name == "values":
        @opts
        @hypothesis_seed(seed)
        @given(option=st.sampled_from(["--at", "--cotangent", "--tangent"]), value=F.value_text, s=F.seeds)
        def body(option, value, s):
            value = value if option == "--cotangent" else "x=" + value
            record(value, F.exercise_value, option, value, s)
    else:
        @opts
        @hypothesis_seed(seed)
        @given(text=F.GENERATORS[name], s=F.seeds)
        def body(text, s):
            record(text, F.exercise, text, s)
    body()


def signature(u: F.Unexpected) -> str:
    """What makes two failures the same bug: where, exception type and source location."""
    where = u.where.split(" at=")[0]
    where = re.sub(r"^cli (\w+).*", r"cli \1", where)
    internal = re.search(r"internal error \((\w+): (.{0,40})", u.detail)
    if internal:
        return f"{where} | exit 3 {internal.group(1)}: {re.sub(r'[0-9.]+', 'N', internal.group(2))}"
    detail = re.sub(r"\d+(\.\d+)?", "N", u.detail)
    m = re.match(r"(\w+(?:Error|Exception|_NotStatic)?):.*?(\([\w/.]+:N\))?$", detail)
    return f"{where} | {m.group(1)} {m.group(2) or ''}" if m else f"{where} | {detail[:120]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory-mb", type=int, default=4096,
                    help="address-space cap, so that a runaway allocation is a MemoryError, not the OOM killer")
    args = ap.parse_args(argv)
    if args.memory_mb:
        cap = args.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))

    tally, counts = F.Tally(), Counter()
    start = time.perf_counter()
    names = list(SHARES)
    quota = {name: round(args.examples * SHARES[name]) for name in names[:-1]}
    quota[names[-1]] = args.examples - sum(quota.values())  # the total is exactly --examples
    for name in names:
        n = quota[name]
        if n <= 0:
            continue
        t = time.perf_counter()
        before = len(tally.failures)
        run_generator(name, n, args.seed, tally, counts)
        print(f"  {name:10s} {counts[name]:6d} examples  {len(tally.failures) - before:4d} unexpected  "
              f"{time.perf_counter() - t:6.1f} s", flush=True)
    elapsed = time.perf_counter() - start

    groups: dict[str, list] = defaultdict(list)
    for gen, u in tally.failures:
        groups[signature(u)].append((gen, u))
    known = len(tally.failures) - len(tally.unknown)
    print(f"fuzz: {tally.examples} examples, {len(tally.failures)} unexpected exceptions "
          f"({known} of them known bugs, {len(groups)} distinct) in {elapsed:.0f} s")
    for sig, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        gen, u = items[0]
        label = F.known_bug(u.detail)
        print(f"\n[{len(items)}x] {sig}" + (f"   (known: {label})" if label else ""))
        print("  generator: " + ", ".join(f"{g} ({n})" for g, n in Counter(g for g, _ in items).most_common()))
        print(f"  where:     {u.where}")
        print(f"  input:     {u.text!r}"[:600])
        print(f"  outcome:   {u.detail}"[:600])
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
