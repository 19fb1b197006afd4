#!/usr/bin/env bash
# GPU smoke test of the model layer (vLLM replicas on Ray). Needs two GPUs, `pip install -e '.[gpu]'`,
# and local weights (nothing is downloaded):
#   cluster/gpu_smoke.sh /models/Qwen3-4B-Instruct-2507 /models/Qwen3-Embedding-4B
# Dry run of the same path on CPU with logical GPUs and the stand-in server:
#   LAUNCHER=standin GPUS=2 cluster/gpu_smoke.sh heuristic hashing
set -euo pipefail
cd "$(dirname "$0")/.."
agent=${1:?usage: cluster/gpu_smoke.sh AGENT_WEIGHTS_PATH EMBEDDER_WEIGHTS_PATH}
embedder=${2:?usage: cluster/gpu_smoke.sh AGENT_WEIGHTS_PATH EMBEDDER_WEIGHTS_PATH}
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}
export HF_HUB_OFFLINE=1
args=(--agent "$agent" --embedder "$embedder" --launcher "${LAUNCHER:-vllm}" -n "${N:-200}")
[ -n "${GPUS:-}" ] && args+=(--gpus "$GPUS")
exec "$PY" cluster/gpu_smoke.py "${args[@]}"
