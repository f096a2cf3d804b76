"""Nothing talks to the network (issue #8: the app works offline).

Index, search (by text, by example, with a trained model), evaluate and a tiny ``polyseek train`` run in
subprocesses whose every Python process (the trainer is a child of the CLI) first imports a
``sitecustomize`` that replaces ``socket.socket``, ``socket.create_connection``, ``socket.getaddrinfo`` and
the host-name lookups with versions that refuse and write down who asked. The commands must succeed and the
record stay empty, so no library quietly tried a download and fell back. Local IPC (``AF_UNIX`` sockets and
socket pairs) is allowed: it is not the network. Native code calling ``connect`` directly is beyond this
guard.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

GUARD = '''
"""Installed as sitecustomize by tests/e2e/test_no_network.py: refuse and record any network access."""
import os
import socket
import sys
import traceback

_LOG = os.environ["NO_NETWORK_LOG"]
_NETWORK_FAMILIES = {socket.AF_INET, socket.AF_INET6, -1}
with open(os.environ["NO_NETWORK_GUARDED"], "a") as guarded:  # which processes ran under the guard
    guarded.write(f"{os.getpid()} {' '.join(sys.orig_argv)}\\n")


def _refuse(what):
    stack = "".join(traceback.format_stack(limit=8)[:-1])
    with open(_LOG, "a") as log:
        log.write(f"pid {os.getpid()}: {what}\\n{stack}\\n")
    raise OSError(f"network access refused by the test guard: {what}")


class GuardedSocket(socket.socket):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if fileno is None and family in _NETWORK_FAMILIES:
            _refuse(f"socket.socket(family={family}, type={type})")
        super().__init__(family, type, proto, fileno)


def _refusing(name):
    def refuse(*args, **kwargs):
        _refuse(f"socket.{name}{args!r}")
    return refuse


socket.socket = GuardedSocket
for _name in ("create_connection", "getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
    setattr(socket, _name, _refusing(_name))
'''


@pytest.fixture
def guarded_env(tmp_path: Path, polyseek_home: Path, assets_dir: Path) -> dict[str, str]:
    """The environment of a guarded subprocess; the record is ``tmp_path / 'network.log'``."""
    site = tmp_path / "guard"
    site.mkdir()
    (site / "sitecustomize.py").write_text(GUARD)
    return {**os.environ, "POLYSEEK_HOME": str(polyseek_home), "POLYSEEK_ASSETS": str(assets_dir),
            "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]),
            "NO_NETWORK_LOG": str(tmp_path / "network.log"),
            "NO_NETWORK_GUARDED": str(tmp_path / "guarded.txt"),
            "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}  # no offline switch may hide an attempt


def polyseek(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, f"polyseek {' '.join(args)}:\n{done.stderr}"
    return done


def test_the_guard_refuses_and_records(guarded_env, tmp_path):
    probe = ("import socket\ntry:\n    socket.create_connection(('192.0.2.1', 80))\n"
             "except OSError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=guarded_env)
    assert "refused by the test guard" in done.stdout
    assert "create_connection" in (tmp_path / "network.log").read_text()


@pytest.mark.slow
def test_index_search_train_and_evaluate_never_touch_the_network(guarded_env, tmp_path):
    from tests.synthetic import make_toy_photo_folder

    toy = tmp_path / "toy"
    make_toy_photo_folder(toy, 24, seed=0, dev_fraction=0.25)
    media = toy / "media"
    example = sorted(media.iterdir())[0]

    indexed = json.loads(polyseek(guarded_env, "index", str(media), "--json").stdout)
    assert indexed["counts"]["image"] == 24 and not indexed["failures"]
    hits = json.loads(polyseek(guarded_env, "search", "a green triangle", "--top", "3", "--json").stdout)
    assert len(hits) == 3
    same = json.loads(polyseek(guarded_env, "search", "--media", str(example), "--json").stdout)
    assert Path(same[0]["path"]).name == example.name
    report = json.loads(polyseek(guarded_env, "evaluate", "--model", "zero-shot", "--data", str(toy),
                                 "--json").stdout)
    assert report["n_media"] == 24

    model = tmp_path / "model"
    polyseek(guarded_env, "train", "--method", "vse", "--data", str(toy), "--train-split", "train",
             "--val-split", "dev", "--preset", "test", "--epochs", "1", "--device", "cpu",
             "--out", str(model))
    assert (model / "model.safetensors").is_file()
    trained = json.loads(polyseek(guarded_env, "search", "a green triangle", "--model", str(model),
                                  "--top", "3", "--json").stdout)
    assert len(trained) == 3

    log = tmp_path / "network.log"
    assert not log.exists(), f"network access was attempted:\n{log.read_text()}"
    guarded = (tmp_path / "guarded.txt").read_text().splitlines()
    assert any("-m trainer train" in line for line in guarded)  # the CLI's trainer child was guarded too
