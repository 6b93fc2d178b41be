#!/usr/bin/env bash
# Ray for a machine that can take at most 64 MiB of files (the device tool's carry): its wheel
# is 79 MB. Writes OUT/ray-trim.tar.xz (the `ray` package without what a driver, a head and
# a worker never load: the dashboard's web client, the Java jars, the ML libraries rllib, data,
# serve, train, tune and llm, source maps and tests; about 28 MB) and OUT/wheels/ (Ray's
# dependencies), for Python PY (default 3.12) on manylinux x86_64. Needs pip's index.
#   bash scripts/trim_ray.sh OUT [PY]
# On the target: tar xJf OUT/ray-trim.tar.xz -C SITE; pip install --no-index --no-deps
# --target SITE OUT/wheels/*.whl; PYTHONPATH=SITE (scripts/gpu_session.sh ray-sweep does so).
set -euo pipefail
out=${1:?usage: trim_ray.sh OUT [PY]} py=${2:-3.12}
version=$(grep -oE '[0-9.]+' "$(dirname "$0")/../requirements-ray.txt" | head -1)
mkdir -p "$out/wheels"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
pip download --quiet --only-binary=:all: --python-version "$py" --implementation cp \
  --platform manylinux2014_x86_64 "ray>=$version" -d "$scratch"
mv "$scratch"/*.whl "$out/wheels/"
wheel=$(ls "$out"/wheels/ray-*.whl)
unzip -q "$wheel" -d "$scratch"  # unzip keeps the binaries executable
rm "$wheel"
rm -rf "$scratch"/ray/{jars,dashboard/client,rllib,data,serve,train,tune,llm}
find "$scratch/ray" \( -name '*.map' -o -name tests -type d \) -prune -exec rm -rf {} +
tar cJf "$out/ray-trim.tar.xz" -C "$scratch" ray "$(cd "$scratch" && ls -d ray-*.dist-info)"
du -sh "$out/ray-trim.tar.xz" "$out/wheels"
