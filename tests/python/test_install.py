# SPDX-License-Identifier: MIT
"""How the Python package gets installed and finds its library: pip into a
virtual environment, make install's directory, the errors a user meets."""

import os
import re
import subprocess
import sys

import pytest

from cluster import TOP

PKG = os.path.join(TOP, "client", "python")


def clean_env(**extra):
    """The environment without the tree's PREDUCE_LIB and PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREDUCE_LIB", "PYTHONPATH", "PREDUCE_SOCKET")}
    env.update(extra)
    return env


def test_pip_install_into_a_venv(tmp_path):
    """pip install (offline) into a venv over Debian's packages: preduce
    imports from another directory with no PREDUCE_LIB, from the library
    the install bundled; preduce-run is on the venv's PATH."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                    str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-index",
         "--no-build-isolation", "--no-cache-dir", "-q", TOP],
        capture_output=True, text=True, env=clean_env())
    assert pip.returncode == 0, pip.stdout + pip.stderr
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import preduce; print(preduce.__file__); "
         "print(preduce._lib._name); print(preduce.__version__)"],
        cwd=tmp_path, capture_output=True, text=True, env=clean_env())
    assert probe.returncode == 0, probe.stderr
    where, lib, version = probe.stdout.split()
    assert where.startswith(str(venv)), where
    assert lib.startswith(str(venv)) and lib.endswith("libpreduce.so.1")
    assert version == header_version()
    run = subprocess.run([str(venv / "bin" / "preduce-run"), "--help"],
                         capture_output=True, text=True, env=clean_env())
    assert run.returncode == 0 and "--nproc-per-node" in run.stdout


def test_make_install_puts_the_package_on_python3s_path(tmp_path):
    """make install PREFIX=/usr/local: the package's directory is one
    Debian's python3 searches, preduce-run and py.typed come with it."""
    dest = tmp_path / "root"
    mk = subprocess.run(["make", "-C", TOP, "--no-print-directory",
                         "install", f"DESTDIR={dest}", "PREFIX=/usr/local"],
                        capture_output=True, text=True)
    assert mk.returncode == 0, mk.stdout + mk.stderr
    pkgs = list(dest.glob("usr/local/lib/python3*/dist-packages/preduce"))
    assert len(pkgs) == 1, pkgs
    pydir = "/" + str(pkgs[0].parent.relative_to(dest))
    path = subprocess.run(["/usr/bin/python3", "-c",
                           "import sys; print('\\n'.join(sys.path))"],
                          capture_output=True, text=True).stdout.split()
    assert pydir in path, (pydir, path)
    for f in ("__init__.py", "torch.py", "run.py", "py.typed"):
        assert (pkgs[0] / f).exists(), f
    launcher = (dest / "usr/local/bin/preduce-run").read_text()
    assert launcher.startswith("#!/usr/bin/python3\n")
    assert f'"{pydir}"' in launcher


def test_a_bad_preduce_lib_is_an_import_error():
    r = subprocess.run([sys.executable, "-c", "import preduce"],
                       capture_output=True, text=True,
                       env=clean_env(PYTHONPATH=PKG,
                                     PREDUCE_LIB="/nonexistent/libp.so.1"))
    assert r.returncode == 1
    assert "ImportError: preduce: PREDUCE_LIB=/nonexistent/libp.so.1 " \
        "cannot be loaded" in r.stderr


def test_connect_errors_name_the_socket(tmp_path):
    import preduce
    path = str(tmp_path / "nothing.sock")
    with pytest.raises(preduce.PreduceError) as e:
        preduce.Client(path, "w0")
    assert path in str(e.value)
    assert "no node daemon listens there" in str(e.value)


def test_a_node_without_its_scheduler_is_named(tmp_path):
    """A node whose scheduler is not there: the connect fails saying so."""
    import subprocess as sp

    import preduce
    from cluster import PREDUCED, free_port, wait_for
    sock = str(tmp_path / "node.sock")
    node = sp.Popen([PREDUCED, "--role", "node", "--set",
                     f"node.socket={sock}", "--set",
                     f"node.scheduler=127.0.0.1:{free_port()}", "--set",
                     f"node.data_listen=127.0.0.1:{free_port()}", "--set",
                     "node.connect_timeout_ms=300"],
                    stdout=sp.DEVNULL, stderr=sp.DEVNULL)
    try:
        wait_for(lambda: os.path.exists(sock), what="the node's socket")
        with pytest.raises(preduce.PreduceError) as e:
            preduce.Client(sock, "w0", timeout_ms=5000)
        assert "no link to its scheduler" in str(e.value), str(e.value)
        assert sock in str(e.value)
    finally:
        node.terminate()
        node.wait(10)


def test_client_defaults_come_from_the_environment(monkeypatch):
    import preduce
    monkeypatch.delenv("PREDUCE_NAME", raising=False)
    monkeypatch.setenv("PREDUCE_RANK", "7")
    assert preduce.default_name() == "rank7"
    monkeypatch.setenv("PREDUCE_NAME", "trainer-a")
    assert preduce.default_name() == "trainer-a"
    monkeypatch.delenv("PREDUCE_NAME")
    monkeypatch.delenv("PREDUCE_RANK")
    assert re.fullmatch(r".+-\d+", preduce.default_name())


def header_version():
    with open(os.path.join(TOP, "client", "include", "preduce.h")) as f:
        text = f.read()
    major = re.search(r"PREDUCE_VERSION_MAJOR (\d+)", text).group(1)
    minor = re.search(r"PREDUCE_VERSION_MINOR (\d+)", text).group(1)
    return f"{major}.{minor}"
