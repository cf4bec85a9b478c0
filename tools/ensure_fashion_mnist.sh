#!/usr/bin/env bash
# Make sure Fashion-MNIST is on disk for the quick-profile chapters (calib.data.load("fashion_mnist")).
# Found in $CALIB_DATA/fashion-mnist, Debian's /usr/share/datasets/fashion-mnist or data/fashion-mnist:
# nothing to do. Otherwise installs Debian's `dataset-fashion-mnist` when we are root (under CI also
# through passwordless sudo, then by downloading with PYTHON, the first argument); else says how.
set -u
PYTHON="${1:-python3}"
FILES="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
have() {
  for f in $FILES; do
    [ -f "$1/$f.gz" ] || [ -f "$1/$f" ] || return 1
  done
}
found() {
  have /usr/share/datasets/fashion-mnist || have data/fashion-mnist || { [ -n "${CALIB_DATA:-}" ] && have "$CALIB_DATA/fashion-mnist"; }
}
found && exit 0
export DEBIAN_FRONTEND=noninteractive
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != "0" ]; then
    SUDO="none"
    [ "${CI:-}" = "true" ] && sudo -n true 2>/dev/null && SUDO="sudo -n"
  fi
  if [ "$SUDO" != "none" ]; then
    echo "fashion-mnist: installing Debian's dataset-fashion-mnist (once)"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null && found && exit 0
  fi
fi
if [ "${CI:-}" = "true" ]; then
  echo "fashion-mnist: no Debian package here; downloading it into data/fashion-mnist"
  "$PYTHON" -c "from calib.data import load; load('fashion_mnist', 'data', download=True)" && exit 0
  echo "fashion-mnist: not installed and could not be installed or downloaded; the chapters need it under CI" >&2
  exit 1
fi
echo "fashion-mnist: not found; install it with 'sudo apt-get install dataset-fashion-mnist' (Debian/Ubuntu), or fetch it into data/fashion-mnist once: python -c \"from calib.data import load; load('fashion_mnist', download=True)\""
exit 0
