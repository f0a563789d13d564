"""gradcalc's benchmark: eight workloads, timed side by side with their baselines and peers.

Run with `make bench`.  Every workload's result is checked against a closed
form first (a fast wrong answer counts for nothing), then timed: the median of
several repeats after a warm-up.  Peers (HIPS autograd, PyTorch, JAX) run
where installed (`pip install -e '.[bench]'`).  Ratios are what matter on a
shared machine: both sides of a ratio are measured in the same run, in
alternating blocks, so that drift hits both.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc

import numpy as np

import gradcalc

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(fn) -> float:
    """Seconds of one call, and of collecting the young garbage it leaves: garbage in reference
    cycles is freed by the cycle collector, whenever it next runs (in a later call, or in one
    of its rare full passes, which a median drops), so it is collected here, inside the
    timing, and counted against the call that made it."""
    t = time.perf_counter()
    fn()
    gc.collect(0)
    return time.perf_counter() - t


def median_time(fn, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn) for _ in range(repeats))


def paired(fn_a, fn_b, repeats: int, budget: float = 1.5, rounds: int = 3) -> tuple[float, float]:
    """Medians of fn_a and fn_b, timed in alternating blocks (A-block, B-block, B-block,
    A-block, ...), each block after a warm-up call, so that drift on a shared machine hits
    both sides of a ratio alike.  Blocks rather than single calls: PyTorch's and JAX's
    thread pools, and OpenBLAS's, keep spinning for a while after a call and would slow
    whichever library runs next.  Quick functions get more repeats (about `budget` s)."""
    t = time.perf_counter()
    fn_a()
    fn_b()
    once = time.perf_counter() - t
    per_block = max(1, max(repeats, min(201, int(budget / max(once, 1e-6)))) // rounds)
    times = {fn_a: [], fn_b: []}
    for r in range(rounds):
        for fn in ((fn_a, fn_b) if r % 2 == 0 else (fn_b, fn_a)):
            fn()
            for _ in range(per_block):
                times[fn].append(timed(fn))
    return statistics.median(times[fn_a]), statistics.median(times[fn_b])


def peak_memory(fn) -> float:
    """Peak traced allocation of fn() in MB (NumPy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def optional(module: str):
    try:
        return __import__(module)
    except Exception:  # noqa: BLE001 - any failure means: not available
        return None


def verify(name: str, got, want, rtol=1e-9, atol=1e-12):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol):
        err = np.max(np.abs(got - want)) if got.shape == want.shape else f"shape {got.shape} != {want.shape}"
        raise SystemExit(f"{name}: WRONG RESULT (max error {err}); not timing it")


class Row:
    def __init__(self, workload, what, seconds, base_name, base_seconds, target, limit):
        self.workload, self.what, self.seconds = workload, what, seconds
        self.base_name, self.base_seconds = base_name, base_seconds
        self.target, self.limit = target, limit

    @property
    def ratio(self):
        return None if self.base_seconds in (None, 0) else self.seconds / self.base_seconds

    @property
    def met(self):
        if self.ratio is None or self.limit is None:  # no peer, or a row for information
            return None
        return self.ratio <= self.limit


# ==========================================================================
# Workloads
# ==========================================================================

def w1_startup(repeats: int):
    exe = os.path.join(os.path.dirname(sys.executable), "gradcalc")
    one_liner = [exe, "grad", "sin(x)*y", "--at", "x=1,y=2"]
    cmd_json = one_liner + ["-f", "json"]
    cmd_base = [sys.executable, "-c", "import numpy"]
    out = subprocess.run(cmd_json, capture_output=True, text=True, check=True).stdout
    import json
    doc = json.loads(out)
    verify("W1", [doc["gradient"]["x"], doc["gradient"]["y"]], [2 * np.cos(1.0), np.sin(1.0)], 0, 0)
    table = subprocess.run(one_liner, capture_output=True, text=True, check=True).stdout
    if f"{2 * np.cos(1.0):.6g}"[:6] not in table or f"{np.sin(1.0):.6g}"[:6] not in table:
        raise SystemExit(f"W1: the table does not show the gradient:\n{table}")
    times = {0: [], 1: [], 2: []}
    env = dict(os.environ)
    cmds = (one_liner, cmd_json, cmd_base)
    for _ in range(2):  # warm the file cache
        for cmd in cmds:
            subprocess.run(cmd, capture_output=True, env=env)
    for _ in range(repeats):  # alternate so that drift hits all three
        for k, cmd in enumerate(cmds):
            t = time.perf_counter()
            subprocess.run(cmd, capture_output=True, env=env)
            times[k].append(time.perf_counter() - t)
    table_t, json_t, base = (statistics.median(times[k]) for k in range(3))
    return [Row("W1", "cold CLI grad one-liner (table output)", table_t, "python -c 'import numpy'", base,
                "≤ 1.5×", 1.5),
            Row("W1", "cold CLI grad one-liner (-f json)", json_t, "python -c 'import numpy'", base,
                "≤ 1.3×", 1.3)]


def w2_big_grad(repeats: int):
    rng = np.random.default_rng(0)
    W = rng.standard_normal((2000, 2000)) / 45
    X = rng.standard_normal((2000, 256))
    b = rng.standard_normal((2000, 1))
    src = "sum(tanh(W @ X + b)^2)"
    at = {"W": W, "X": X, "b": b}

    def numpy_forward():
        return np.sum(np.tanh(W @ X + b) ** 2)

    def ours():
        return gradcalc.grad(src, at=at)

    r = ours()
    h = np.tanh(W @ X + b)
    d = 2 * h * (1 - h * h)
    verify("W2 dW", r["W"], d @ X.T, 1e-9, 1e-9)
    verify("W2 dX", r["X"], W.T @ d, 1e-9, 1e-9)
    verify("W2 db", r["b"], d.sum(axis=1, keepdims=True), 1e-9, 1e-9)
    def by_hand():
        # The floor of this target: the same gradient written out in NumPy, with no checks, in
        # place where it can be; three matrix products against the forward pass's one.
        t = W @ X
        t += b
        np.tanh(t, out=t)
        np.sum(t * t)
        g = t * t
        np.subtract(1.0, g, out=g)
        g *= t
        g *= 2.0
        return g @ X.T, W.T @ g, g.sum(axis=1, keepdims=True)

    for got, want in zip(by_hand(), (d @ X.T, W.T @ d, d.sum(axis=1, keepdims=True))):
        verify("W2 by hand", got, want, 1e-9, 1e-9)
    t_ours, t_np = paired(ours, numpy_forward, repeats)
    t_hand, t_np2 = paired(by_hand, numpy_forward, repeats)
    mem_np, mem_ours = peak_memory(numpy_forward), peak_memory(ours)
    rows = [Row("W2", f"grad, 2000×2000 @ 2000×256 (peak {mem_ours:.0f} MB; numpy forward "
                      f"{mem_np:.0f} MB)", t_ours, "numpy forward pass", t_np, "≤ 3×", 3.0),
            Row("W2", "(the floor: that gradient by hand in NumPy, unchecked)", t_hand,
                "numpy forward pass", t_np2, "-", None)]
    ag = optional("autograd")
    if ag:
        import autograd.numpy as anp

        def f(W, X, b):
            return anp.sum(anp.tanh(anp.dot(W, X) + b) ** 2)
        gf = ag.grad(lambda args: f(*args))
        verify("W2 autograd", gf((W, X, b))[0], d @ X.T, 1e-9, 1e-9)
        t_ours2, t_ag = paired(ours, lambda: gf((W, X, b)), repeats)
        rows.append(Row("W2", "grad vs HIPS autograd", t_ours2, "autograd.grad", t_ag, "< 1×", 1.0))
    return rows


def recurrence_source(n: int) -> str:
    return "\n".join(["input x0 = 0.5"] + [f"x{i + 1} = sin(x{i})*1.01 + 0.1*x{i}" for i in range(n)])


def w3_recurrence(repeats: int):
    n = 3000
    src = recurrence_source(n)
    x, d = 0.5, 1.0
    for _ in range(n):
        d *= np.cos(x) * 1.01 + 0.1
        x = np.sin(x) * 1.01 + 0.1 * x
    verify("W3", gradcalc.grad(src)["x0"], d, 1e-12, 1e-15)
    ours = lambda: gradcalc.grad(src)  # noqa: E731
    rows = []
    torch = optional("torch")
    if torch:
        def torch_grad():
            x0 = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
            x = x0
            for _ in range(n):
                x = torch.sin(x) * 1.01 + 0.1 * x
            x.backward()
            return x0.grad
        verify("W3 torch", torch_grad().item(), d, 1e-12, 1e-15)
        t_ours, t_torch = paired(ours, torch_grad, repeats)
        rows.append(Row("W3", f"parse + grad of a {n}-statement recurrence", t_ours,
                        "torch eager autograd", t_torch, "≤ 0.3×", 0.3))
    else:
        rows.append(Row("W3", f"parse + grad of a {n}-statement recurrence", median_time(ours, repeats),
                        "torch (absent)", None, "≤ 0.3×", 0.3))
    return rows


def w4_data():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((500, 500)) / 22
    x = rng.standard_normal(500)
    h = np.tanh(A @ x)
    return A, x, (1 - h * h)[:, None] * A


def w4_jacobian(repeats: int):
    A, x, want = w4_data()
    src = "tanh(A @ x)"
    at = {"A": A, "x": x}
    verify("W4", gradcalc.jacobian(src, at=at, wrt=["x"])["_"]["x"], want)
    ours = lambda: gradcalc.jacobian(src, at=at, wrt=["x"])  # noqa: E731
    rows = []
    ag = optional("autograd")
    if ag:
        import autograd.numpy as anp
        from autograd import jacobian as ajac
        jf = ajac(lambda x: anp.tanh(anp.dot(A, x)))
        verify("W4 autograd", jf(x), want)
        t_ours, t_ag = paired(ours, lambda: jf(x), repeats)
        rows.append(Row("W4", "jacobian of tanh(A @ x), A 500×500", t_ours, "autograd.jacobian",
                        t_ag, "≤ 0.5×", 0.5))
    jax = optional("jax")
    if jax:
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        Aj = jnp.asarray(A)
        jf = jax.jit(jax.jacrev(lambda x: jnp.tanh(Aj @ x)))
        xj = jnp.asarray(x)
        verify("W4 jax", np.asarray(jf(xj)), want)
        t_ours, t_jax = paired(ours, lambda: jf(xj).block_until_ready(), repeats)
        rows.append(Row("W4", "jacobian of tanh(A @ x), A 500×500", t_ours, "jax.jit(jax.jacrev)",
                        t_jax, "≤ 1×", 1.0))
    if not rows:
        rows.append(Row("W4", "jacobian of tanh(A @ x), A 500×500", median_time(ours, repeats),
                        "peers (absent)", None, "≤ 0.5× autograd", 0.5))
    return rows


def w5_check(repeats: int):
    A, x, _ = w4_data()
    src = "tanh(A @ x)"
    at = {"A": A, "x": x}
    r = gradcalc.check(src, at=at, wrt=["x"])
    if not r.ok:
        raise SystemExit("W5: check failed on a correct program")
    ours = lambda: gradcalc.check(src, at=at, wrt=["x"])  # noqa: E731
    torch = optional("torch")
    if torch:
        At = torch.tensor(A)
        xt = torch.tensor(x, requires_grad=True)
        ok = torch.autograd.gradcheck(lambda x: torch.tanh(At @ x), (xt,))
        if not ok:
            raise SystemExit("W5: gradcheck failed")
        t_ours, t_torch = paired(ours, lambda: torch.autograd.gradcheck(lambda x: torch.tanh(At @ x), (xt,)),
                                 repeats)
        return [Row("W5", "check: full Jacobian vs central differences", t_ours,
                    "torch.autograd.gradcheck", t_torch, "≤ 0.1×", 0.1)]
    return [Row("W5", "check: full Jacobian vs central differences", median_time(ours, repeats),
                "gradcheck (absent)",
                None, "≤ 0.1×", 0.1)]


def w6_hessian(repeats: int):
    n = 200
    rng = np.random.default_rng(2)
    x = rng.standard_normal(n)
    src = "sum(100*(x[1:] - x[:-1]^2)^2 + (1 - x[:-1])^2)"
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        H[i, i + 1] += -400 * x[i]
        H[i + 1, i] += -400 * x[i]
        H[i + 1, i + 1] += 200
    verify("W6", gradcalc.hessian(src, at={"x": x})["x"]["x"], H, 1e-10, 1e-9)
    ours = lambda: gradcalc.hessian(src, at={"x": x})  # noqa: E731
    torch = optional("torch")
    if torch:
        xt = torch.tensor(x)

        def f(x):
            return torch.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

        def th():
            return torch.autograd.functional.hessian(f, xt, vectorize=True)
        verify("W6 torch", th().numpy(), H, 1e-10, 1e-9)
        t_ours, t_torch = paired(ours, th, repeats)
        return [Row("W6", f"hessian of Rosenbrock, n = {n}", t_ours,
                    "torch.autograd.functional.hessian(vectorize=True)", t_torch, "≤ 0.5×", 0.5)]
    return [Row("W6", f"hessian of Rosenbrock, n = {n}", median_time(ours, repeats), "torch (absent)",
                None, "≤ 0.5×", 0.5)]


# ==========================================================================
# Loops: W7 (a scalar ODE, 10,000 steps) and W8 (an RNN, 200 steps)
# ==========================================================================

def beside_torch(workload: str, what: str, ours, torch_fn, repeats: int, limit: float) -> Row:
    """The row of a loop workload against PyTorch eager on the same Python loop (torch_fn, or
    None where PyTorch is absent)."""
    target = f"≤ {limit}×"
    if not torch_fn:
        return Row(workload, what, median_time(ours, repeats), "torch (absent)", None, target, limit)
    t_ours, t_torch = paired(ours, torch_fn, repeats)
    return Row(workload, what, t_ours, "torch eager (the same Python loop)", t_torch, target, limit)


PENDULUM = """input th0, om0, g, c
th = th0
om = om0
for i in range(10000) {
  a = -g * sin(th) - c * om
  th = th + 0.001 * om
  om = om + 0.001 * a
}
E = 0.5 * om^2 + g * (1 - cos(th))
"""
PENDULUM_AT = {"th0": 1.0, "om0": 0.5, "g": 9.81, "c": 0.3}


def pendulum_by_hand(th0, om0, g, c, steps=10000, h=0.001):
    """The pendulum's gradient by a reverse sweep written out by hand: the forward Euler steps
    (keeping every state), then their adjoints newest first."""
    ths, oms = [th0], [om0]
    th, om = th0, om0
    for _ in range(steps):
        a = -g * np.sin(th) - c * om
        th, om = th + h * om, om + h * a
        ths.append(th)
        oms.append(om)
    dth, dom, dg, dc = g * np.sin(th), om, 1 - np.cos(th), 0.0  # E = om^2/2 + g (1 - cos th)
    for i in range(steps - 1, -1, -1):
        th, om = ths[i], oms[i]
        da = h * dom  # om' = om + h a
        dg -= da * np.sin(th)  # a = -g sin(th) - c om
        dc -= da * om
        dth, dom = dth - da * g * np.cos(th), dom + h * dth - da * c  # th' = th + h om
    return [dth, dom, dg, dc]


def w7_pendulum(repeats: int):
    want = pendulum_by_hand(**PENDULUM_AT)
    names = ["th0", "om0", "g", "c"]
    r = gradcalc.grad(PENDULUM, at=PENDULUM_AT)
    verify("W7", [r[k] for k in names], want, 1e-9, 1e-12)
    ours = lambda: gradcalc.grad(PENDULUM, at=PENDULUM_AT)  # noqa: E731
    mem = peak_memory(ours)
    what = f"grad of a 10,000-step Euler loop (peak {mem * 2**20 / 10000 / 1024:.1f} KB a step)"
    rows = []
    torch = optional("torch")
    if torch:
        def torch_grad():
            leaves = [torch.tensor(PENDULUM_AT[k], dtype=torch.float64, requires_grad=True) for k in names]
            th, om, g, c = leaves
            for _ in range(10000):
                a = -g * torch.sin(th) - c * om
                th, om = th + 0.001 * om, om + 0.001 * a
            E = 0.5 * om ** 2 + g * (1 - torch.cos(th))
            E.backward()
            return [t.grad.item() for t in leaves]
        verify("W7 torch", torch_grad(), want, 1e-9, 1e-12)
    rows.append(beside_torch("W7", what, ours, torch and torch_grad, repeats, 0.2))
    ag = optional("autograd")
    if ag:
        import autograd.numpy as anp

        def energy(p):
            th, om, g, c = p[0], p[1], p[2], p[3]
            for _ in range(10000):
                a = -g * anp.sin(th) - c * om
                th, om = th + 0.001 * om, om + 0.001 * a
            return 0.5 * om ** 2 + g * (1 - anp.cos(th))
        ag_grad = ag.grad(energy)
        point = np.array([PENDULUM_AT[k] for k in names])
        verify("W7 autograd", ag_grad(point), want, 1e-9, 1e-12)
        t_ours, t_ag = paired(ours, lambda: ag_grad(point), max(1, repeats // 3))
        rows.append(Row("W7", what, t_ours, "autograd.grad (the same Python loop)", t_ag, "-", None))
    jax = optional("jax")
    if jax:
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        def energy_jax(p):
            def step(_, s):
                th, om = s
                a = -p[2] * jnp.sin(th) - p[3] * om
                return th + 0.001 * om, om + 0.001 * a
            th, om = jax.lax.fori_loop(0, 10000, step, (p[0], p[1]))
            return 0.5 * om ** 2 + p[2] * (1 - jnp.cos(th))
        jf = jax.jit(jax.grad(energy_jax))
        pj = jnp.asarray([PENDULUM_AT[k] for k in names])
        verify("W7 jax", np.asarray(jf(pj)), want, 1e-9, 1e-12)
        t_ours, t_jax = paired(ours, lambda: jf(pj).block_until_ready(), repeats)
        rows.append(Row("W7", what, t_ours, "jax.jit(jax.grad), lax.fori_loop (compiled)", t_jax, "-", None))
    return rows


RNN = """input W, U, b, X, h0
h = h0
loss = 0
for t in range(200) {
  h = tanh(W @ h + U @ X[t] + b)
  loss += sum(h^2)
}
loss
"""


def rnn_data():
    rng = np.random.default_rng(3)
    return {"W": rng.standard_normal((128, 128)) / 12, "U": rng.standard_normal((128, 16)) / 4,
            "b": rng.standard_normal((128, 1)) / 10, "X": rng.standard_normal((200, 16, 32)),
            "h0": np.zeros((128, 32))}


def rnn_by_hand(W, U, b, X, h0):
    """The RNN's gradient by backpropagation through time written out in NumPy."""
    hs = [h0]
    for t in range(len(X)):
        hs.append(np.tanh(W @ hs[-1] + U @ X[t] + b))
    dW, dU, db, dh = np.zeros_like(W), np.zeros_like(U), np.zeros_like(b), np.zeros_like(h0)
    for t in range(len(X) - 1, -1, -1):
        h = hs[t + 1]
        dh = dh + 2 * h  # loss += sum(h^2)
        dz = dh * (1 - h * h)
        dW += dz @ hs[t].T
        dU += dz @ X[t].T
        db += dz.sum(axis=1, keepdims=True)
        dh = W.T @ dz
    return [dW, dU, db]


def w8_rnn(repeats: int):
    at = rnn_data()
    want = rnn_by_hand(**at)
    wrt = ["W", "U", "b"]
    r = gradcalc.grad(RNN, at=at, wrt=wrt)
    for k, w in zip(wrt, want):
        verify(f"W8 d{k}", r[k], w, 1e-9, 1e-9)
    ours = lambda: gradcalc.grad(RNN, at=at, wrt=wrt)  # noqa: E731
    mem = peak_memory(ours)
    what = f"grad of a 200-step tanh RNN, hidden 128, batch 32 (peak {mem / 200 * 1024:.0f} KB a step)"
    rows = []
    torch = optional("torch")
    if torch:
        tt = {k: torch.tensor(v) for k, v in at.items()}

        def torch_grad():
            W, U, b = (tt[k].clone().requires_grad_(True) for k in wrt)
            X, h = tt["X"], tt["h0"]
            loss = 0
            for t in range(200):
                h = torch.tanh(W @ h + U @ X[t] + b)
                loss = loss + torch.sum(h ** 2)
            loss.backward()
            return [W.grad.numpy(), U.grad.numpy(), b.grad.numpy()]
        for got, w in zip(torch_grad(), want):
            verify("W8 torch", got, w, 1e-9, 1e-9)
    rows.append(beside_torch("W8", what, ours, torch and torch_grad, repeats, 0.7))
    ag = optional("autograd")
    if ag:
        import autograd.numpy as anp

        def loss_ag(W, U, b):
            h, loss = at["h0"], 0.0
            for t in range(200):
                h = anp.tanh(anp.dot(W, h) + anp.dot(U, at["X"][t]) + b)
                loss = loss + anp.sum(h ** 2)
            return loss
        ag_grad = ag.grad(lambda p: loss_ag(*p))
        for got, w in zip(ag_grad((at["W"], at["U"], at["b"])), want):
            verify("W8 autograd", got, w, 1e-9, 1e-9)
        t_ours, t_ag = paired(ours, lambda: ag_grad((at["W"], at["U"], at["b"])), repeats)
        rows.append(Row("W8", what, t_ours, "autograd.grad (the same Python loop)", t_ag, "-", None))
    jax = optional("jax")
    if jax:
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        Xj, h0j = jnp.asarray(at["X"]), jnp.asarray(at["h0"])

        def loss_jax(p):
            W, U, b = p

            def step(h, x):
                h = jnp.tanh(W @ h + U @ x + b)
                return h, jnp.sum(h ** 2)
            _, parts = jax.lax.scan(step, h0j, Xj)
            return jnp.sum(parts)
        jf = jax.jit(jax.grad(loss_jax))
        pj = tuple(jnp.asarray(at[k]) for k in wrt)
        for got, w in zip(jf(pj), want):
            verify("W8 jax", np.asarray(got), w, 1e-9, 1e-9)
        t_ours, t_jax = paired(ours, lambda: jax.block_until_ready(jf(pj)), repeats)
        rows.append(Row("W8", what, t_ours, "jax.jit(jax.grad), lax.scan (compiled)", t_jax, "-", None))
    return rows


WORKLOADS = {"W1": w1_startup, "W2": w2_big_grad, "W3": w3_recurrence, "W4": w4_jacobian,
             "W5": w5_check, "W6": w6_hessian, "W7": w7_pendulum, "W8": w8_rnn}


def fmt_seconds(s):
    if s is None:
        return "-"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--only", nargs="*", default=list(WORKLOADS))
    args = ap.parse_args(argv)
    rows = []
    for name in args.only:
        # W1's processes are the noisiest measurement: more of them
        rows += WORKLOADS[name](args.repeats if name != "W1" else max(args.repeats, 20))
    print(f"gradcalc benchmark — {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, NumPy {np.__version__}")
    print("| workload | what | gradcalc | baseline / peer | their time | ratio | target | met |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}×"
        met = {True: "yes", False: "NO", None: "n/a" if r.limit is not None else "-"}[r.met]
        print(f"| {r.workload} | {r.what} | {fmt_seconds(r.seconds)} | {r.base_name} | "
              f"{fmt_seconds(r.base_seconds)} | {ratio} | {r.target} | {met} |")
    print("every result above was verified against a closed form before it was timed")


if __name__ == "__main__":
    main()
