"""Issue 20 item 4: selpe's per-batch min-max utilities and their setting.

The rescale keeps the utilities in [-1, 0], so the round's sensitivity, noise scale and
OpenDP map are those of the raw utilities; only the gap between candidates grows.
"""

from __future__ import annotations

import numpy as np
import pytest

from release.config_file import load_config
from release.config_sections import SelectionConfig
from release.dp.noisy_max import calibrate_noisy_max_scale
from release.selection import OneClassPerUnit, PrivateClasses, RoundOutput, SelectionRun
from release.selection.selpe import MODE, batch_utilities, minmax, round_measurement
from selpe_audit.demo.generator import generate_rows
from selpe_audit.errors import UserError
from selpe_audit.kernel.distance import Kernel, KernelConfig


def _round_inputs(demo_schema, pool_rows):
    """Numeric-kernel private classes (no embedder) and one pool shared by every class."""
    kernel = Kernel(demo_schema, None, KernelConfig(channels="numeric"))
    rows = generate_rows(80, seed=41)
    by = {c: [r for r in rows if r["acuity"] == c] for c in demo_schema.classes}
    priv = PrivateClasses({c: kernel.featurize_private(v) for c, v in by.items() if v},
                          {c: [r["patient_id"] for r in v] for c, v in by.items()})
    feats = kernel.featurize([{k: v for k, v in r.items() if k != "patient_id"}
                              for r in pool_rows])
    return kernel, OneClassPerUnit(priv), {c: (feats, kernel.fit_scale(feats))
                                          for c in demo_schema.classes}


def test_minmax_spans_minus_one_to_zero_and_is_zero_when_flat():
    u = np.array([-0.31, -0.29, -0.30, -0.33])
    r = minmax(u)
    assert r.max() == 0.0 and r.min() == -1.0 and np.all((r >= -1) & (r <= 0))
    assert np.argmax(r) == np.argmax(u) and np.argmin(r) == np.argmin(u)  # order kept
    np.testing.assert_array_equal(minmax(np.full(5, -0.4)), np.zeros(5))
    assert minmax(np.array([])).size == 0


def test_batch_utilities_minmax_vs_raw(demo_schema):
    kernel, kept, pools = _round_inputs(demo_schema, generate_rows(12, seed=42))
    key, b = b"s" * 32, 3
    c = max(kept.priv_unit_ids, key=lambda k: len(kept.priv_unit_ids[k]))
    for i in range(b):
        raw = batch_utilities(kept, kernel, pools, c, i, b, key, "raw")
        scaled = batch_utilities(kept, kernel, pools, c, i, b, key)  # minmax: the default
        assert np.all((raw >= -1) & (raw <= 0)) and np.all((scaled >= -1) & (scaled <= 0))
        assert np.ptp(raw) > 0  # these candidates differ ...
        assert scaled.max() == 0.0 and scaled.min() == -1.0  # ... so the rescale spans [-1, 0]
        assert np.ptp(raw) < np.ptp(scaled)
    # identical candidates: all zero, so the noisy max picks uniformly
    _, _, same = _round_inputs(demo_schema, [generate_rows(1, seed=43)[0]] * 6)
    np.testing.assert_array_equal(batch_utilities(kept, kernel, same, c, 0, b, key),
                                  np.zeros(6))


def test_the_rounds_opendp_map_is_the_same_for_raw_and_minmax(demo_schema):
    kernel, kept, pools = _round_inputs(demo_schema, generate_rows(9, seed=44))
    eps = 0.2  # selection 1 over T = 5 rounds (the earlier defaults)
    scale = calibrate_noisy_max_scale(9, eps)
    maps = {u: [round_measurement(kernel, pools, 5, scale, b"k" * 32, utility=u).map(d)
                for d in (1, 2)] for u in ("raw", "minmax")}
    assert maps["raw"] == maps["minmax"]
    assert maps["minmax"][0] == pytest.approx(eps, rel=1e-12) and maps["minmax"][0] <= eps
    out = round_measurement(kernel, pools, 5, scale, b"k" * 32)(kept)
    assert all(len(v) == 5 and all(0 <= j < 9 for j in v) for v in out.values())
    with pytest.raises(ValueError, match="utility"):
        round_measurement(kernel, pools, 5, scale, b"k" * 32, utility="bogus")


def test_utility_setting_is_checked_and_reaches_the_ledger(tmp_path):
    """selpe's utility is its own setting ([selection.selpe], or --utility)."""
    with pytest.raises(UserError, match=r"\[selection\.selpe\]: utility must be 'minmax' "
                                        "or 'raw'"):
        SelectionConfig(settings={"utility": "bogus"})
    assert SelectionConfig().settings.utility == "minmax"
    toml = tmp_path / "r.toml"
    head = ('data = "x.csv"\nschema = "s.json"\nrelease_key = "k.pem"\n'
            f'out = "{tmp_path / "out"}"\n')
    toml.write_text(head + '[selection.selpe]\nutility = "raw"\n')
    assert load_config(toml, {}).selection.settings.utility == "raw"
    assert load_config(toml, {"utility": "minmax"}).selection.settings.utility == "minmax"
    toml.write_text(toml.read_text().replace('"raw"', '"bogus"'))
    with pytest.raises(UserError, match="'minmax' or 'raw'"):
        load_config(toml, {})
    toml.write_text(head + '[selection]\nutility = "raw"\n')  # the old flat key says where
    with pytest.raises(UserError, match=r"write it in a \[selection\.selpe\] table"):
        load_config(toml, {})
    run = SelectionRun([RoundOutput(1, 0.2, 10.0, 1)], None)  # type: ignore[arg-type]
    for u, words in (("minmax", "min-max rescaled"), ("raw", "as is")):
        (entry,) = MODE.ledger_entries(SelectionConfig(settings={"utility": u}), run)
        assert words in entry.scope
