#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine for keras-transformer, idempotently:
#   system packages (Python venv support, the offline English-German corpus `trans-de-en`),
#   the LibreOffice help pages in English and German (the main job's corpus, unpacked into
#   data/libreoffice-help), a virtual environment (default .venv, override with VENV=...), and this package in it.
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
    # Without root the corpus can still be unpacked into the project (the data flags point at it).
    if [[ " ${apt_packages[*]} " == *" trans-de-en "* ]] && command -v apt-get >/dev/null; then
      echo "setup: no root; unpacking trans-de-en into data/trans-de-en instead"
      mkdir -p data/trans-de-en && (cd data/trans-de-en && apt-get download trans-de-en >/dev/null && dpkg -x trans-de-en_*.deb . && rm -f trans-de-en_*.deb)
    else
      echo "setup: could not install ${apt_packages[*]} (need root or sudo)." >&2
      exit 1
    fi
  fi
fi

# The LibreOffice help pages: unpacked, not installed (installing pulls in LibreOffice itself).
help_dir="data/libreoffice-help"
help_packages=(libreoffice-help-en-us libreoffice-help-de)
if [ ! -d /usr/share/libreoffice/help/de/text ] && [ ! -d "$help_dir/usr/share/libreoffice/help/de/text" ]; then
  echo "setup: unpacking ${help_packages[*]} into $help_dir"
  mkdir -p "$help_dir"
  download() { (cd "$help_dir" && apt-get download "${help_packages[@]}" >/dev/null 2>&1); }
  if ! download && ! { as_root apt-get update -q >/dev/null 2>&1 && download; }; then
    echo "setup: could not download ${help_packages[*]} (apt-get download needs the Debian/Ubuntu package lists: run 'sudo apt-get update')." >&2
    exit 1
  fi
  for deb in "$help_dir"/libreoffice-help-*.deb; do dpkg -x "$deb" "$help_dir"; done
  rm -f "$help_dir"/libreoffice-help-*.deb
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
# Built now rather than in the first training run's clock (a few seconds, once per TensorFlow version);
# of TensorFlow's start-up lines only a warning about the kernel is shown.
"$venv/bin/python" -c "from keras_transformer.layers import cpu_kernels
print('setup: CPU kernels', 'ready' if cpu_kernels.ops() else 'not built: training uses TensorFlow ops')" \
  2>&1 | grep -E "^setup: |CPU kernels"
echo "setup: done"
