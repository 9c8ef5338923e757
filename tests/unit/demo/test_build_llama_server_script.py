"""scripts/build-llama-server.sh, run with a stub pip and a stub cmake: it downloads llama-cpp-python's sdist
alone (never ``--no-binary :all:``, which made pip compile the build backend from source too), builds
once, and a second run is served from the cache without asking pip again."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "build-llama-server.sh"
VERSION = "0.3.36"

STUB_PYTHON = """#!{python}
import json, os, shutil, sys
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args[:3] == ["-m", "pip", "download"]:
    dest = args[args.index("-d") + 1]
    shutil.copy(os.environ["STUB_SDIST"], dest)
"""

STUB_CMAKE = """#!/bin/sh
# configure: nothing; --build DIR: a llama-server that answers --version
if [ "$1" = "--build" ]; then
  mkdir -p "$2/bin"
  printf '#!/bin/sh\\necho "version: 1 (stub)"\\n' > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
fi
"""


def _sdist(path: Path) -> None:
    """A tarball shaped like the sdist: the vendored server folder and the vocab file."""
    root = f"llama_cpp_python-{VERSION}/vendor/llama.cpp"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in ((f"{root}/tools/server/server.cpp", b"// stub\n"),
                           (f"{root}/models/ggml-vocab-llama-spm.gguf", b"GGUF stub vocab")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "stubs"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "EBB_CACHE": str(tmp_path / "cache"), "PYTHON": str(bin_dir / "python"),
           "STUB_LOG": str(tmp_path / "calls.jsonl"), "STUB_SDIST": str(tmp_path / f"llama_cpp_python-{VERSION}.tar.gz")}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def stubs(tmp_path: Path) -> Path:
    if shutil.which("bash") is None or shutil.which("tar") is None:
        pytest.skip("needs bash and tar to run the build script")
    bin_dir = tmp_path / "stubs"
    bin_dir.mkdir()
    for name, text in (("python", STUB_PYTHON.format(python=sys.executable)), ("cmake", STUB_CMAKE),
                       ("c++", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    _sdist(tmp_path / f"llama_cpp_python-{VERSION}.tar.gz")
    return tmp_path


def test_the_script_downloads_only_the_llama_cpp_python_sdist_and_the_second_run_uses_the_cache(stubs: Path) -> None:
    first = _run(stubs)
    assert first.returncode == 0, first.stderr
    calls = [json.loads(line) for line in (stubs / "calls.jsonl").read_text().splitlines()]
    downloads = [c for c in calls if c[:3] == ["-m", "pip", "download"]]
    assert len(downloads) == 1
    argv = downloads[0]
    # pip's --no-binary :all: reaches the isolated build environment: the backend was compiled from source
    assert ":all:" not in argv
    assert argv[argv.index("--no-binary") + 1] == "llama-cpp-python" and "--no-deps" in argv
    assert [a for a in argv if "==" in a] == [f"llama-cpp-python=={VERSION}"]
    assert argv[argv.index("-d") + 1] == str(stubs / "cache" / "src")
    assert (stubs / "cache" / "llama" / "ggml-vocab-llama-spm.gguf").read_bytes() == b"GGUF stub vocab"
    assert "llama-server: " in first.stdout
    again = _run(stubs)
    assert again.returncode == 0 and "(cached)" in again.stdout
    assert len((stubs / "calls.jsonl").read_text().splitlines()) == len(calls)  # pip was not asked again
