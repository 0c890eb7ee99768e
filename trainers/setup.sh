#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine for keras-transformer, idempotently:
#   system packages (Python venv support, the offline English-German corpus `trans-de-en`),
#   a virtual environment (default .venv, override with VENV=...), this package in it, and the
#   LibreOffice help pages in English and German (the main job's corpus, unpacked into data/libreoffice-help).
# Usage: bash trainers/setup.sh [EXTRA]     e.g. `bash trainers/setup.sh test` adds the test extras,
#        `bash trainers/setup.sh gpu` TensorFlow's CUDA libraries. Always with the `pinned` extra: the exact
#        stack the project is tested with (setup.cfg).
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
venv="${VENV:-.venv}"
python="${PYTHON:-python3}"

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@";
  elif command -v sudo >/dev/null 2>&1; then sudo "$@";
  else return 1; fi
}

# Installs Debian packages; once more after `apt-get update` (a fresh image has no package lists).
apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 ||
    { as_root apt-get update -q >/dev/null &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
}

apt_packages=()
command -v "$python" >/dev/null 2>&1 || apt_packages+=(python3)
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then apt_packages+=(python3-venv python3-pip); fi
ding_file="${KT_DING_FILE:-/usr/share/trans/de-en}"
[ -f "$ding_file" ] || apt_packages+=(trans-de-en)

if [ ${#apt_packages[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${apt_packages[*]}"
  if ! apt_install "${apt_packages[@]}"; then
    # Without root the corpus can still be unpacked into the project (below).
    if [[ " ${apt_packages[*]} " == *" trans-de-en "* ]] && command -v apt-get >/dev/null; then
      echo "setup: no root; trans-de-en goes into data/trans-de-en instead"
    else
      echo "setup: could not install ${apt_packages[*]} (need root or sudo)." >&2
      exit 1
    fi
  fi
fi

# Our CPU kernels (dropout, LayerNorm, the loss's softmax: keras_transformer/layers/cpu_kernels.cc)
# are built with the C++ compiler; without one training uses TensorFlow's ops instead: the same numbers, more
# slowly.
if ! command -v c++ >/dev/null 2>&1; then
  echo "setup: installing g++ (for our CPU kernels)"
  apt_install g++ ||
    echo "setup: could not install g++; training will use TensorFlow's ops (slower, same numbers)"
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating virtual environment $venv"
  "$python" -m venv "$venv"
fi
spec=".[pinned]"
[ -n "$extra" ] && spec=".[pinned,$extra]"
echo "setup: pip install -e '$spec' into $venv (the first time downloads ~2.7 GB)"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q -e "$spec"

# The offline corpora where the system has none: their Debian packages unpacked under data/ without root
# (keras_transformer.data.debian, as the quickstart and `prepare_data --download` do; installing the
# LibreOffice help would pull in LibreOffice itself). Once more after `apt-get update` if that fails.
corpora='import sys
from keras_transformer.data import ding, libreoffice_help
try:
    for name, corpus in (("the LibreOffice help pages", libreoffice_help),
                         ("the Ding dictionary", ding)):
        print(f"setup: corpus ready: {name} in {corpus.fetch()}", flush=True)
except ValueError as error:
    sys.exit(f"setup: {error}")'
"$venv/bin/python" -c "$corpora" 2>/dev/null ||
  { as_root apt-get update -q >/dev/null 2>&1; "$venv/bin/python" -c "$corpora"; }
# Built now rather than in the first training run's clock (a few seconds, once per TensorFlow version);
# of TensorFlow's start-up lines only a warning about the kernel is shown.
"$venv/bin/python" -c "from keras_transformer.layers import cpu_kernels
print('setup: CPU kernels', 'ready' if cpu_kernels.ops() else 'not built: training uses TensorFlow ops')" \
  2>&1 | grep -E "^setup: |CPU kernels"
echo "setup: done"
