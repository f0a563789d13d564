"""A run that is about to take the last of the machine's memory stops with an error (SPEC §7),
before the kernel's out-of-memory killer ends it with no message (core/alloc.py memory_left)."""
from __future__ import annotations

import numpy as np
import pytest

import gradcalc
from gradcalc import run
from gradcalc.alloc import Memory, memory, memory_left
from gradcalc.errors import LimitError

MEMINFO = "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:    2000000 kB\n"


def _tree(tmp_path, files: dict) -> str:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_the_machine_s_available_memory_when_no_group_limits_it(tmp_path):
    root = _tree(tmp_path, {"proc/meminfo": MEMINFO, "sys/fs/cgroup/memory.max": "max\n",
                            "sys/fs/cgroup/memory.current": "123\n"})
    assert memory(root) == Memory(2000000 * 1024, 24000000 * 1024)
    assert memory_left(root) == 2000000 * 1024


def test_a_cgroup_v2_limit_less_its_usage_without_the_cache_it_can_give_back(tmp_path):
    # a CI container of 1 GiB with 900 MiB used, 100 MiB of which inactive page cache
    root = _tree(tmp_path, {"proc/meminfo": MEMINFO, "sys/fs/cgroup/memory.max": f"{1 << 30}\n",
                            "sys/fs/cgroup/memory.current": f"{900 << 20}\n",
                            "sys/fs/cgroup/memory.stat": f"anon 1\ninactive_file {100 << 20}\nactive_file 5\n"})
    assert memory(root) == Memory((1 << 30) - (800 << 20), 1 << 30)  # (in all: the group's limit)


def test_a_cgroup_v1_limit_and_the_smaller_of_the_two(tmp_path):
    files = {"proc/meminfo": MEMINFO, "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{8 << 30}\n",
             "sys/fs/cgroup/memory/memory.usage_in_bytes": f"{1 << 30}\n",
             "sys/fs/cgroup/memory/memory.stat": "cache 7\ntotal_inactive_file 0\n"}
    assert memory_left(_tree(tmp_path, files)) == 2000000 * 1024  # the machine has less than the group
    files["sys/fs/cgroup/memory/memory.usage_in_bytes"] = f"{(8 << 30) - (5 << 20)}\n"
    assert memory_left(_tree(tmp_path, files)) == 5 << 20
    # v1 writes "no limit" as 2^63 rounded down to a page
    files["sys/fs/cgroup/memory/memory.limit_in_bytes"] = "9223372036854771712\n"
    assert memory_left(_tree(tmp_path, files)) == 2000000 * 1024


def test_the_process_s_own_group_where_it_is_mounted_as_named(tmp_path):
    # a job's group below the top of the hierarchy (v1 on a host: /proc/self/cgroup names it)
    files = {"proc/meminfo": MEMINFO, "proc/self/cgroup": "9:memory:/jobs/42\n8:pids:/\n",
             "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
             "sys/fs/cgroup/memory/memory.usage_in_bytes": f"{5 << 30}\n",
             "sys/fs/cgroup/memory/jobs/42/memory.limit_in_bytes": f"{1 << 30}\n",
             "sys/fs/cgroup/memory/jobs/42/memory.usage_in_bytes": f"{(1 << 30) - (64 << 20)}\n"}
    assert memory_left(_tree(tmp_path / "a", files)) == 64 << 20
    # a container that sees only its own group, at the top, under the host's name for it
    del files["sys/fs/cgroup/memory/jobs/42/memory.limit_in_bytes"]
    files["sys/fs/cgroup/memory/memory.limit_in_bytes"] = f"{2 << 30}\n"
    files["sys/fs/cgroup/memory/memory.usage_in_bytes"] = f"{1 << 30}\n"
    assert memory_left(_tree(tmp_path / "b", files)) == 1 << 30


def test_nothing_to_tell_where_there_is_no_proc(tmp_path):
    assert memory_left(str(tmp_path)) is None


@pytest.mark.skipif(not memory_left(), reason="no /proc/meminfo here")
def test_this_machine_has_some_left():
    assert 0 < memory_left() < 1 << 50


RUNAWAY = "input x[1000]\ny = x\nwhile true { y = y * 1.0000001 }\nsum(y)"


def _little_left(monkeypatch, left: int, total: int = 24 << 30) -> list:
    """Memory as a machine of total bytes with left to give; the looks taken, each 1 MB of growth."""
    looks = []
    monkeypatch.setattr(run, "MEMORY_LOOK_EVERY", 1 << 20)
    monkeypatch.setattr(run, "memory", lambda: looks.append(1) or Memory(left, total))
    return looks


@pytest.mark.parametrize("fn", [gradcalc.grad, gradcalc.evaluate, gradcalc.hessian])
def test_a_runaway_loop_stops_before_the_machine_runs_out(monkeypatch, fn):
    # before: the tape of a loop over 1000-element values grew by 8 KB a step until --max-steps
    # (10^7 steps: 80 GB), and the kernel killed the process with no message
    looks = _little_left(monkeypatch, 100 << 20)
    with pytest.raises(LimitError) as caught:
        fn(RUNAWAY, at={"x": np.ones(1000)})
    assert str(caught.value) == ("<expr>:3:1: out of memory in the loop at line 3, column 1: 100 MB of this "
                                 "machine's memory is left")
    assert "never ends" in caught.value.hint and len(looks) == 1


def test_with_memory_to_spare_a_loop_runs_to_its_end(monkeypatch):
    looks = _little_left(monkeypatch, 8 << 30)
    src = "input x[1000]\ny = x\nfor i in range(2000) { y = y * 1.0000001 }\nsum(y)"
    g = gradcalc.grad(src, at={"x": np.ones(1000)})["x"]
    assert np.allclose(g, 1.0000001 ** 2000, rtol=1e-12, atol=0)
    assert len(looks) >= 10  # (2000 steps of 8 KB values and their equations: a look a megabyte)


def test_a_scalar_loop_counts_its_equations(monkeypatch):
    # a scalar loop makes no array; its equations (about 350 bytes each) are what grows
    looks = _little_left(monkeypatch, 100 << 20)
    with pytest.raises(LimitError, match="out of memory in the loop"):
        gradcalc.grad("input x = 1\ny = x\nwhile true { y = y * 1.0000001 }\ny", at={"x": 1.0})
    assert len(looks) == 1


@pytest.mark.parametrize("left, stops", [(100 << 20, False), (50 << 20, True)])
def test_in_a_small_container_the_reserve_is_an_eighth_of_it(monkeypatch, left, stops):
    # 512 MB in all: 256 MB kept in reserve would stop a run at half of it; an eighth is 64 MB
    _little_left(monkeypatch, left, total=512 << 20)
    src = "input x[1000]\ny = x\nfor i in range(300) { y = y * 1.0000001 }\nsum(y)"
    if stops:
        with pytest.raises(LimitError, match="out of memory in the loop"):
            gradcalc.grad(src, at={"x": np.ones(1000)})
    else:
        assert gradcalc.grad(src, at={"x": np.ones(1000)})["x"][0] == pytest.approx(1.0000001 ** 300, rel=1e-13)
