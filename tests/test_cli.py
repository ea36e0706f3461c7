import json
import os
import subprocess
import sys

from workstation import __version__


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "workstation", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_version():
    out = _cli("--version")
    assert out.returncode == 0 and __version__ in out.stdout


def test_doctor_reports_in_plain_words_and_json(tmp_path):
    env = {"WORKSTATION_DATA_DIR": str(tmp_path / "fresh")}
    out = _cli("doctor", env=env)
    assert out.returncode == 0, out.stderr
    assert "engine: not set up" in out.stdout and "workstation engine setup" in out.stdout
    assert "GPU:" in out.stdout and "disk:" in out.stdout
    report = json.loads(_cli("doctor", "--json", env=env).stdout)
    assert report["engine"] is None and report["python"].startswith("3.")
    assert report["data_dir"] == str(tmp_path / "fresh")


def test_data_dir_flag_moves_everything(tmp_path):
    target = tmp_path / "elsewhere"
    out = _cli("--data-dir", str(target), "doctor", "--json")
    assert json.loads(out.stdout)["data_dir"] == str(target)
    assert (target / "logs" / "workstation.log").is_file()


def test_broken_settings_file_is_a_clear_error(tmp_path):
    (tmp_path / "settings.json").write_text('{"engine": {"port": "not a number"}}')
    out = _cli("doctor", env={"WORKSTATION_DATA_DIR": str(tmp_path)})
    assert out.returncode == 2
    assert "settings are invalid at 'engine.port'" in out.stderr and "Traceback" not in out.stderr
