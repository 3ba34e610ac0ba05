"""`tengen bench gpu-loop`, the parts that run without a GPU: its refusal where no CUDA device is
found, its arguments, the export check across torch versions and a whole small run on the CPU
ending in its JSON line (the figures themselves come from a lent GPU machine)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tengen.bench.gpu_loop import check_reference, make_reference
from tengen.cli import main

TENGEN = [sys.executable, "-m", "tengen.cli"]


def test_without_cuda_it_stops_with_a_clear_message() -> None:
    done = subprocess.run([*TENGEN, "bench", "gpu-loop"], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "no CUDA device found" in done.stderr and "--device cpu" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("bad", [["--processes", "0"], ["--boards", "21", "--device", "cpu"], ["--half", "maybe"]])
def test_bad_arguments_are_refused(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["bench", "gpu-loop", *bad])
    assert stop.value.code not in (0, None)


def test_the_reference_export_matches_itself_and_notices_other_weights(tmp_path: Path) -> None:
    make_reference(tmp_path / "ref", seed=1)
    same = check_reference(tmp_path / "ref", "cpu")
    assert same["cpu_policy_max_diff"] == 0.0 and same["cpu_winrate_max_diff"] == 0.0
    make_reference(tmp_path / "other", seed=2)  # other weights under the first reference's outputs
    (tmp_path / "other" / "inputs.npz").unlink()
    (tmp_path / "other" / "inputs.npz").symlink_to(tmp_path / "ref" / "inputs.npz")
    assert check_reference(tmp_path / "other", "cpu")["cpu_policy_max_diff"] > 1e-5  # near-uniform policies


@pytest.mark.slow
def test_a_small_run_on_the_cpu_ends_with_its_figures() -> None:
    done = subprocess.run(
        [*TENGEN, "bench", "gpu-loop", "--device", "cpu", "--seconds", "6", "--archs", "b1c16", "--boards", "7",
         "--processes", "1", "2", "--games", "2", "--train-arch", "b1c16", "--train-batch", "8", "--half", "no"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "gpu-loop" and figures["export"]["cpu_policy_max_diff"] == 0.0
    [cell] = figures["selfplay"]
    assert [n["processes"] for n in cell["nodes"]] == [1, 2] and cell["best_processes"] in (1, 2)
    assert all(n["positions_per_s"] > 0 and n["mean_batch"] > 0 for n in cell["nodes"])
    assert figures["trainer"]["full_step_samples_per_s"] > 0 and figures["trainer"]["bf16_ratio"] > 0
