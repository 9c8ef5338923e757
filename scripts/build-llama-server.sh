#!/usr/bin/env bash
# Build llama.cpp's llama-server once, from the sources vendored in the PyPI sdist llama-cpp-python 0.3.36,
# and cache it outside the repo: ${EBB_CACHE:-$HOME/.cache/ebb}/build-llama/bin/llama-server.
# Also copies the sdist's ggml-vocab-llama-spm.gguf to $CACHE/llama/ (the tokenizer of Ebb's tiny test model).
#
# Idempotent: when the binary exists, runs `--version` and the vocab is in place, it exits 0 at once.
# Otherwise: installs build-essential and cmake when missing (root + apt-get only), downloads the sdist
# with pip (no wheel, no deps), configures a Release CPU build without the web UI, OpenSSL, curl, tests or
# examples, and builds the one target (about 10 CPU-minutes: ~6 min on 2 idle cores).
#
# The download asks for the sdist of llama-cpp-python alone (`--no-binary llama-cpp-python`), never
# `--no-binary :all:`: pip prepares an sdist's metadata in an isolated build environment, and `:all:`
# reaches that environment too, so its build backend (scikit-build-core, and cmake when the system has
# none) was compiled from source as well: 12 minutes before our own cmake started. With the package
# named, the backend comes as wheels (about 6 s for the whole download here).
set -euo pipefail
VERSION=0.3.36
CACHE=${EBB_CACHE:-$HOME/.cache/ebb}
BIN=$CACHE/build-llama/bin/llama-server
VOCAB=$CACHE/llama/ggml-vocab-llama-spm.gguf
SRC=$CACHE/src/llama_cpp_python-$VERSION
# pip: $PYTHON, else the repo's .venv (make creates it), else python3
HERE=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x "$HERE/.venv/bin/python" ]; then PY=$HERE/.venv/bin/python; else PY=python3; fi

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1 && [ -s "$VOCAB" ]; then
  echo "llama-server: $BIN (cached)"
  exit 0
fi

mkdir -p "$CACHE/src" "$CACHE/llama"
if [ ! -d "$SRC/vendor/llama.cpp/tools/server" ]; then
  if [ ! -f "$CACHE/src/llama_cpp_python-$VERSION.tar.gz" ]; then
    "$PY" -m pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" \
      -d "$CACHE/src"
  fi
  tar -xzf "$CACHE/src/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE/src"
fi
cp "$SRC/vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf" "$VOCAB.tmp" && mv "$VOCAB.tmp" "$VOCAB"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "llama-server: $BIN (cached); vocab: $VOCAB"
  exit 0
fi

if ! command -v cmake >/dev/null || ! command -v c++ >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential cmake
  else
    echo "build-llama-server.sh: needs a C++ compiler and cmake (apt-get install build-essential cmake)" >&2
    exit 2
  fi
fi

cmake -S "$SRC/vendor/llama.cpp" -B "$CACHE/build-llama" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF > "$CACHE/cmake.log"
cmake --build "$CACHE/build-llama" --target llama-server -j"$(nproc)" > "$CACHE/build.log" 2>&1 || {
  tail -30 "$CACHE/build.log" >&2; exit 1; }
"$BIN" --version
echo "llama-server: $BIN; vocab: $VOCAB"
