#!/usr/bin/env bash
# Submit a sweep as a Ray job to a local head started here, then stop that head (and only it).
#
#   cluster/local_job.sh                       # pmem sweep jobs/quickstart.toml
#   cluster/local_job.sh jobs/x.toml --limit 2 # any `pmem sweep` arguments
#   cluster/local_job.sh ingest /abs/stream.jsonl --out /abs/state.arrow --partitions 2   # `pmem ingest`
#
# What it does, exactly as a user would on a real head node:
#   ray start --head ...
#   ray job submit --address http://127.0.0.1:8265 --working-dir . -- pmem sweep jobs/quickstart.toml
# Ray 2.60 turns token authentication on for local clusters; this script sets RAY_AUTH_MODE=token and one
# RAY_AUTH_TOKEN for both the head and the client, so they agree. Nothing is installed from the network:
# the head runs from the project's virtualenv (its `ray`, `python` and `pmem` on PATH), the job inherits
# that environment, and `--working-dir .` only ships the source tree (Ray skips .gitignore'd paths such
# as .venv/ and runs/). PMEM_OUT makes the run directory land in ./runs instead of the job's temporary
# copy of the working directory.
#
# Env: DASHBOARD_PORT (8265), NUM_CPUS (2), PMEM_OUT (./runs), KEEP=1 leaves the head running.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV_BIN=${VENV_BIN:-$ROOT/.venv/bin}
export PATH="$VENV_BIN:$PATH"
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN=${RAY_AUTH_TOKEN:-$(python -c 'import secrets; print(secrets.token_hex(24))')}
export PMEM_OUT=${PMEM_OUT:-$ROOT/runs}
export RAY_DEDUP_LOGS=0
DASH=${DASHBOARD_PORT:-8265}
# A private temp dir: every process of this head carries it in its command line, which is how
# stop_head finds exactly them (`ray stop` would stop every Ray cluster of this user on the machine).
TMP=$(mktemp -d /tmp/pmemray-XXXXXX)
free_port() { python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
GCS_PORT=$(free_port)
# Ray's fixed default ports (dashboard agent HTTP 52365, Ray Client 10001) belong to whichever cluster
# took them first: a second cluster on the machine (a notebook's ray.init(), a test session) would leave
# this head without a job agent, and every submission refused. Free ones are picked instead.
AGENT_PORT=$(free_port)
CLIENT_PORT=$(free_port)

stop_head() {
  if [[ "${KEEP:-0}" == 1 ]]; then echo "head left running (temp dir $TMP)"; return; fi
  local pids
  pids=$(grep -l -a -F "$TMP" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 | sort -u | tr '\n' ' ' || true)
  [[ -n "$pids" ]] && kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 1 50); do
    pids=$(grep -l -a -F "$TMP" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 | sort -u | tr '\n' ' ' || true)
    [[ -z "$pids" ]] && break
    sleep 0.2
  done
  [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null || true
  rm -rf "$TMP"
}
trap stop_head EXIT
echo "ray head temp dir: $TMP"

ray start --head --node-ip-address 127.0.0.1 --port "$GCS_PORT" --dashboard-host 127.0.0.1 \
  --dashboard-port "$DASH" --dashboard-agent-listen-port "$AGENT_PORT" --ray-client-server-port "$CLIENT_PORT" \
  --num-cpus "${NUM_CPUS:-2}" --temp-dir "$TMP" --disable-usage-stats \
  --include-dashboard true >"$TMP/ray-start.log" 2>&1 || { cat "$TMP/ray-start.log"; exit 1; }

# the dashboard (job server) can lag the head by a few seconds
for _ in $(seq 1 60); do
  ray job list --address "http://127.0.0.1:$DASH" >/dev/null 2>&1 && break
  sleep 1
done

# the job runs in a copy of the working directory: give `pmem ingest` absolute paths
COMMAND=sweep
if [[ "${1:-}" == ingest ]]; then COMMAND=ingest; shift; fi
if [[ $# -eq 0 ]]; then set -- jobs/quickstart.toml; fi
# The job server answers before the head's job agent has registered with it; until then it refuses a
# submission with "No available agent to submit job, please try again later" (HTTP 500) and starts
# nothing, so sending the same submission again is safe. Any other failure is final.
for attempt in $(seq 1 30); do
  set +e
  ray job submit --address "http://127.0.0.1:$DASH" --working-dir . -- pmem "$COMMAND" "$@" 2>&1 | tee "$TMP/submit.log"
  rc=${PIPESTATUS[0]}
  set -e
  if [[ $rc -eq 0 ]] || ! grep -q "No available agent to submit job" "$TMP/submit.log"; then exit "$rc"; fi
  echo "job agent not registered yet (attempt $attempt of 30); submitting again in 2 s"
  sleep 2
done
exit "$rc"
