"""``scripts/pass_breakdown.py``: its parts come from the profile's own functions and its fields add up."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pass_breakdown", ROOT / "scripts" / "pass_breakdown.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Stats:
    """A pstats.Stats stand-in: (file, line, function) → (cc, nc, tottime, cumtime, callers)."""

    def __init__(self, rows: dict[tuple[str, int, str], tuple[float, float]]) -> None:
        self.stats: dict[tuple[str, int, str], tuple[int, int, float, float, dict[object, object]]] = {
            key: (1, 1, own, cum, {}) for key, (own, cum) in rows.items()
        }


def test_parts_add_own_time_and_take_the_outermost_cumulative(script: ModuleType) -> None:
    stats = _Stats({
        ("/x/hf_textdp/cpu/int8_filter.py", 245, "run"): (1.0, 1.0),
        ("/x/hf_textdp/cpu/int8_keys.py", 255, "run"): (0.5, 0.5),
        ("/x/hf_textdp/cpu/distances.py", 43, "pair_sqdist"): (0.1, 0.12),
        ("/x/hf_textdp/mechanisms/bounded.py", 240, "perturb_positions"): (0.01, 0.3),
        ("/x/hf_textdp/mechanisms/base.py", 124, "perturb_positions"): (0.02, 0.25),  # called by bounded's
        ("/x/hf_textdp/privatizer.py", 297, "read_batch"): (0.01, 0.07),
        ("/x/hf_textdp/tokens.py", 159, "decode_flat"): (0.005, 0.03),
        ("/x/hf_textdp/other.py", 1, "run"): (9.0, 9.0),  # another file's run is no kernel
    })  # fmt: skip
    parts = script.part_seconds(stats)
    assert parts == pytest.approx(
        {"kernel": 1.5, "distances": 0.1, "read_tokenize": 0.07, "noise": 0.3, "decode": 0.03}
    )


def test_a_run_reports_consistent_fields(
    script: ModuleType, tiny_bert: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = script.main(["--mechanism", "madlib/nearest", "--rows", "30", "--text", "sample", "--model", tiny_bert])
    assert out["tokens"] > 0 and out["arithmetic"] in ("fp32", "bf16", "int8")
    parts = out["parts_s"]
    assert set(parts) == {"kernel", "distances", "read_tokenize", "noise", "decode", "rest"}
    assert parts["read_tokenize"] > 0 and parts["decode"] > 0 and parts["noise"] > 0
    assert sum(parts.values()) == pytest.approx(out["pass_s"], abs=1e-5)
    assert out["pass_of_bound"] == pytest.approx(out["bound_s"] / out["pass_s"], abs=2e-3)
    assert 0 < out["ceiling_kernel_at_bound"] <= 1
    assert '"case": "madlib/nearest"' in capsys.readouterr().out
