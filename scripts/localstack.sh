#!/usr/bin/env bash
# LocalStack in host mode (no Docker): a second S3 + SQS implementation, besides moto's
# server, for the tests marked `aws` (every test whose fixtures include s3_endpoint).
#
#   scripts/localstack.sh install   own virtualenv in .localstack-venv (idempotent: stamp)
#   scripts/localstack.sh start     start on 127.0.0.1:$PORT, wait until s3 and sqs run
#   scripts/localstack.sh stop      SIGTERM, then SIGKILL (SIGTERM hangs about half the time)
#   scripts/localstack.sh test [pytest args...]
#                                   install if needed, start, `pytest -m aws` against it,
#                                   always stop; exits with pytest's code (5 -> 1)
#
# Environment: COMPACTOR_LOCALSTACK_PORT (default 4566) if that port is busy;
# COMPACTOR_LOCALSTACK_START_TIMEOUT seconds (default 90); PYTHON (default python3, 3.11+).
# Run state (pid file, log, the state directory's path) lives in .localstack-run/<port>/;
# LocalStack's own state goes to a fresh temp directory, removed by stop.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.localstack-venv"
LOCK="$ROOT/scripts/localstack-requirements.txt"
STAMP="$VENV/.installed"
PYTHON="${PYTHON:-python3}"
PORT="${COMPACTOR_LOCALSTACK_PORT:-4566}"
START_TIMEOUT="${COMPACTOR_LOCALSTACK_START_TIMEOUT:-90}"
STOP_GRACE=5
RUN_DIR="$ROOT/.localstack-run/$PORT"
PID_FILE="$RUN_DIR/localstack.pid"
LOG_FILE="$RUN_DIR/localstack.log"
STATE_FILE="$RUN_DIR/statedir"  # holds the temp directory's path
URL="http://127.0.0.1:$PORT"

say() { echo "localstack: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}

# pip install, quiet; warnings about absent local index directories are noise.
pip_install() {
    "$VENV/bin/pip" install --quiet "$@" 2> >(grep -v '^WARNING: Location .* is ignored' >&2)
}

lock_hash() { sha256sum "$LOCK" | cut -d' ' -f1; }

cmd_install() {
    if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(lock_hash)" ]]; then
        touch "$STAMP" # up to date, also for make (the lock may have a newer mtime only)
        return 0
    fi
    local t0=$SECONDS
    say "installing LocalStack into $VENV (about 500 MB, a minute or three)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" || die "could not create $VENV with $PYTHON"
    pip_install --upgrade "pip==26.3" || die "could not upgrade pip in $VENV"
    pip_install -r "$LOCK" || die "pip install -r $LOCK failed (see above); $VENV is incomplete"
    "$VENV/bin/python" -c 'import localstack.runtime.main' ||
        die "LocalStack installed but does not import"
    lock_hash >"$STAMP"
    say "installed in $((SECONDS - t0)) s"
}

# Is something accepting connections on 127.0.0.1:$PORT?
port_busy() {
    "$PYTHON" - "$PORT" <<'EOF'
import socket, sys
s = socket.socket()
s.settimeout(1)
sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
EOF
}

# Exit 0 once /_localstack/health shows s3 and sqs "running"; prints the states.
health_ok() {
    "$VENV/bin/python" - "$URL/_localstack/health" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        services = json.load(r).get("services", {})
except Exception as e:
    print(f"no answer ({type(e).__name__})")
    sys.exit(1)
states = {name: services.get(name, "absent") for name in ("s3", "sqs")}
print(", ".join(f"{n}: {s}" for n, s in states.items()))
sys.exit(0 if all(s == "running" for s in states.values()) else 1)
EOF
}

running_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

cmd_start() {
    [[ -f "$STAMP" ]] || die "not installed: run scripts/localstack.sh install"
    if pid="$(running_pid)"; then
        die "already running (pid $pid, $PID_FILE): run scripts/localstack.sh stop"
    fi
    if port_busy; then
        die "127.0.0.1:$PORT is already in use; set COMPACTOR_LOCALSTACK_PORT to a free port"
    fi
    mkdir -p "$RUN_DIR"
    local state
    state="$(mktemp -d "${TMPDIR:-/tmp}/compactor-localstack.XXXXXX")"
    echo "$state" >"$STATE_FILE"
    local t0=$SECONDS
    # Host mode as in RESEARCH.md. The default (twisted) gateway binds 0.0.0.0: hypercorn
    # binds loopback only. LocalStack deletes $TMPDIR/localstack at start: a private TMPDIR.
    # setsid: its own process group, so stop reaches any child it spawns.
    (
        cd "$state"
        exec env \
            GATEWAY_LISTEN="127.0.0.1:$PORT" GATEWAY_SERVER=hypercorn \
            LOCALSTACK_HOST="127.0.0.1:$PORT" SERVICES=s3,sqs EAGER_SERVICE_LOADING=1 \
            PERSISTENCE=0 DNS_ADDRESS=0 DISABLE_EVENTS=1 SKIP_SSL_CERT_DOWNLOAD=1 \
            SQS_ENDPOINT_STRATEGY=path TMPDIR="$state" FILESYSTEM_ROOT="$state/fs" \
            LOCALSTACK_VOLUME_DIR="$state/volume" \
            setsid "$VENV/bin/python" -m localstack.runtime.main
    ) >"$LOG_FILE" 2>&1 </dev/null &
    local pid=$!
    disown "$pid" # no "Killed" report from this shell when stop has to SIGKILL it
    echo "$pid" >"$PID_FILE"
    local status=""
    while ! status="$(health_ok)"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            say "error: LocalStack (pid $pid) exited during start-up; last lines of $LOG_FILE:"
            tail -n 30 "$LOG_FILE" >&2
            cmd_stop
            exit 1
        fi
        if ((SECONDS - t0 >= START_TIMEOUT)); then
            say "error: s3 and sqs not running after ${START_TIMEOUT} s ($status);" \
                "last lines of $LOG_FILE:"
            tail -n 30 "$LOG_FILE" >&2
            cmd_stop
            exit 1
        fi
        sleep 0.5
    done
    say "running on $URL (pid $pid, ready in $((SECONDS - t0)) s; $status)"
}

cmd_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        say "not running"
    else
        # The process group setsid made (pgid == pid), else the process alone.
        local target="-$pid"
        kill -0 -- "$target" 2>/dev/null || target="$pid"
        kill -TERM -- "$target" 2>/dev/null || true
        local waited=0
        while kill -0 "$pid" 2>/dev/null && ((waited < STOP_GRACE * 10)); do
            sleep 0.1
            waited=$((waited + 1))
        done
        if kill -0 "$pid" 2>/dev/null; then
            say "no exit ${STOP_GRACE} s after SIGTERM: SIGKILL"
            kill -KILL -- "$target" 2>/dev/null || true
        else
            kill -KILL -- "$target" 2>/dev/null || true # any child left in the group
        fi
        say "stopped (pid $pid)"
    fi
    rm -f "$PID_FILE"
    if [[ -f "$STATE_FILE" ]]; then
        rm -rf "$(cat "$STATE_FILE")"
        rm -f "$STATE_FILE"
    fi
}

cmd_test() {
    cmd_install
    local t0=$SECONDS
    trap cmd_stop EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    cmd_start
    local rc=0
    (
        cd "$ROOT"
        export COMPACTOR_TEST_S3_ENDPOINT="$URL"
        export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1
        # Nothing from the developer's AWS set-up: no profile, token or config file.
        unset AWS_PROFILE AWS_SESSION_TOKEN AWS_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3
        export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
        exec .venv/bin/python -m pytest -q -p no:cacheprovider -m aws "$@"
    ) || rc=$?
    say "pytest against LocalStack: exit $rc after $((SECONDS - t0)) s (start included)"
    if ((rc == 5)); then
        say "error: pytest selected no tests marked aws" \
            "(see the hook in tests/conftest.py, and any -k given)"
        rc=1
    fi
    return "$rc"
}

case "${1:-}" in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
test)
    shift
    cmd_test "$@"
    ;;
*)
    echo "usage: $0 install|start|stop|test [pytest args...]" >&2
    exit 2
    ;;
esac
