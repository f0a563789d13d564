"""Rendering of `gradcalc graph`: an equation listing, rich tables, or Graphviz dot."""
from __future__ import annotations

import numpy as np

from gradcalc.tape import equation_rhs, params_text

from . import render


def _shape(node) -> str:
    return render.shape_text(np.empty(node["shape"], dtype=np.int8)) if node["shape"] else "scalar"


def _rhs(node, precision: int) -> str:
    """The node's equation, printed as the tape prints its own (gradcalc.tape.equation_rhs)."""
    if node["op"] == "input":
        operand = node.get("name", "")
    elif node["op"] == "const":
        operand = render.value_text(node["value"], precision)
    else:
        operand = ""
    return equation_rhs(node["op"], node["args"], node.get("params"), operand)


def _where(node) -> str:
    """Where an equation was recorded: `2:5`, and `2:5 in f` inside a call of the program's f."""
    if "line" not in node:
        return ""
    return f"{node['line']}:{node['column']}" + (f" in {node['function']}" if "function" in node else "")


def _omitted(node) -> str:
    """What a summary says of the equations it leaves out (gradcalc.graphs.summarised)."""
    return f"{node['count']} more equations, {node['first']} to {node['last']} (--full shows them)"


def listing(nodes, precision: int, guessed=()) -> str:
    """One line per equation, like JAX's jaxprs: `v5 = tanh(v4)   # h, 1:5, 2`."""
    lines, phase = [], "forward"
    if guessed:
        lines.append(f"# shapes guessed for {', '.join(guessed)} (no values given; use --at)")
    for n in nodes:
        if n["phase"] != phase:
            phase = n["phase"]
            lines.append("# backward: one VJP rule per forward equation, newest first")
        if n["op"] == "gradient":
            lines.append(f"# {n['name']} = {_gradient_of(n)}")
            continue
        if n["op"] == "omitted":
            lines.append(f"# ... {_omitted(n)}")
            continue
        notes = [x for x in (n.get("name"), _where(n) or None,
                             _shape(n), f"vjp of {n['vjp_of']}" if "vjp_of" in n else None) if x]
        lines.append(f"{n['id']} = {_rhs(n, precision)}".ljust(40) + "  # " + ", ".join(notes))
    if _seed_note(nodes):
        lines.append("# " + _seed_note(nodes))
    return "\n".join(lines) + "\n"


def tables(nodes, output, guessed, precision: int) -> None:
    from rich.table import Table

    out = render.console()
    forward = [n for n in nodes if n["phase"] == "forward"]
    backward = [n for n in nodes if n["phase"] == "backward" and n["op"] != "gradient"]
    show_values = any("value" in n for n in forward if n["op"] != "const")
    cols = ["id", "equation", "shape", "where", "name"] + (["value"] if show_values else [])

    def table(rows, extra=None):
        t = Table()
        for c in cols + ([extra] if extra else []):
            t.add_column(c, justify="right" if c == "value" else "left")
        for n in rows:
            if n["op"] == "omitted":
                t.add_row("…", _omitted(n), *[""] * (len(t.columns) - 2))
                continue
            cells = [n["id"], _rhs(n, precision), _shape(n), _where(n), n.get("name", "")]
            if show_values:
                cells.append(render.value_text(n["value"], precision) if "value" in n else "")
            if extra:
                cells.append(n.get("vjp_of", n.get("role", "")))
            t.add_row(*cells)
        return t

    out.print(f"forward tape: {_count(forward, ('input', 'const'))} equations, output {output}", style="bold")
    out.print(table(forward))
    if guessed:
        out.print(f"shapes guessed for {', '.join(guessed)} (no values given; use --at to set them)")
    if backward:
        grads = [n for n in nodes if n["op"] == "gradient"]
        out.print(f"backward tape: {_count(backward, ('const',))} equations, "
                  f"one VJP rule per forward equation; no Jacobian is ever formed", style="bold")
        out.print(table(backward, "vjp of"))
        out.print("gradients: " + ", ".join(f"{g['name']} = {_gradient_of(g)}" for g in grads))
        if _seed_note(nodes):
            out.print(_seed_note(nodes))


def _seed_note(nodes) -> str | None:
    """A note when the backward pass is seeded with ones (a non-scalar output), or None."""
    for n in nodes:
        if n.get("role", "").startswith("seed: ones"):
            seed, _, of = n["role"][len("seed: "):].partition(", the gradient of ")
            return (f"note: the output is not a scalar: the backward pass is seeded with {seed} and computes "
                    f"the gradient of {of} (what grad --sum runs; grad refuses a non-scalar output)")
    return None


def _count(nodes, besides) -> int:
    """The equations of a phase: its nodes but those of the ops besides, and those a summary
    left out."""
    return sum(n["count"] if n["op"] == "omitted" else 1 for n in nodes if n["op"] not in besides)


def _gradient_of(n) -> str:
    return n["args"][0] if n["args"] else "unconnected (no differentiable path)"


def _quote(s: str) -> str:
    """A DOT string: quotes and backslashes escaped, newlines as \\n."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot(nodes, output, guessed=()) -> str:
    """Graphviz: inputs as ellipses, operations as boxes, outputs bold; backward dashed."""
    lines = ["digraph gradcalc {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=10];']
    if guessed:
        lines.append(f"  // shapes guessed for {', '.join(guessed)} (no values given; use --at)")
    gradients = 0
    for n in nodes:
        if n["op"] == "gradient":  # one node each: two inputs may share a gradient variable (x + y)
            gradients += 1
            if not n["args"]:
                lines.append(f"  grad{gradients} [label={_quote(n['name'] + chr(10) + '(unconnected)')}, "
                             "shape=note, style=dashed];")
                continue
            gid = f"grad{gradients}_{n['args'][0]}"
            lines.append(f"  {gid} [label={_quote(n['name'])}, shape=note, style=dashed];")
            lines.append(f"  {n['args'][0]} -> {gid} [style=dashed];")
            continue
        label = n["op"] if n["op"] not in ("input", "const") else (
            n.get("name", "") if n["op"] == "input" else render.value_text(n["value"], 4).replace("\n", " "))
        if n["op"] not in ("input", "const"):
            params = params_text(n.get("params"))
            label = f"{n['id']} = {label}" + (f"\n{params}" if params else "")
            if n.get("name"):
                label += f"\n[{n['name']}]"
            if n.get("function"):
                label += f"\nin {n['function']}"
        shape = {"input": "ellipse", "const": "plaintext"}.get(n["op"], "box")
        attrs = [f"label={_quote(label)}", f"shape={shape}"]
        if n["phase"] == "backward":
            attrs.append("style=dashed")
        if n.get("name") == output and n["phase"] == "forward":
            attrs.append("penwidth=2")
        lines.append(f"  {n['id']} [{', '.join(attrs)}];")
        for a in n["args"]:
            style = " [style=dashed]" if n["phase"] == "backward" else ""
            lines.append(f"  {a} -> {n['id']}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"
