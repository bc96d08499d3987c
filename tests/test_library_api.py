"""`import gpuaudit` gives the capabilities' functions, loaded on first use, without torch."""

from __future__ import annotations

import subprocess
import sys

import gpuaudit


def test_every_exported_name_resolves_to_a_callable():
    for name in gpuaudit.__all__:
        if name != "__version__":
            assert callable(getattr(gpuaudit, name)), name


def test_import_is_light_and_needs_no_torch():
    code = ("import sys; sys.modules['torch'] = None; import gpuaudit; "
            "assert 'gpuaudit.cost.recommend' not in sys.modules; "
            "assert 'gpuaudit.telemetry.monitor' not in sys.modules; "
            "gpuaudit.load_catalog(); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_an_unknown_name_is_an_attribute_error():
    try:
        gpuaudit.no_such_thing  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
