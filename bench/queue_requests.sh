#!/usr/bin/env bash
# What `compactor schedule` and one `compactor worker` send to S3, split into the
# catalog's keys and data: moto's server on loopback, 40 L0 files of 1,000 records over 8
# partitions, `level.trigger.files=4` (10 L0->L1 jobs), one worker draining them.
#
#   bash bench/queue_requests.sh [PYTHONPATH-ROOT] [PORT]
#
# PYTHONPATH-ROOT: a checkout whose code to run (default: this one; another commit's
# worktree compares with it). Prints "<phase> <GET|PUT|LIST> <catalog|data> <count>"
# lines, then the number of jobs the worker committed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-$here}
port=${2:-4811}
work=$(mktemp -d)
cd "$work"
"$here/.venv/bin/moto_server" -p "$port" > moto.log 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -s "http://127.0.0.1:$port" >/dev/null && break; sleep 0.2; done
. "$here/.venv/bin/activate"
export PYTHONPATH=$root AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$port COMPACTOR_STORE=s3://compactor
aws s3 mb s3://compactor >/dev/null
q=$(aws sqs create-queue --endpoint-url "$AWS_ENDPOINT_URL" --queue-name compactor-jobs \
    --query QueueUrl --output text)
compactor topic create orders --partitions 8 --config cleanup.policy=compact >/dev/null
python3 -c '
import json, random
random.seed(1)
for i in range(40000):
    print(json.dumps({"topic": "orders", "partition": i % 8, "key": f"k{random.randrange(5000)}", "value": f"v{i}"}))
' > records.jsonl
compactor ingest records.jsonl --max-file-records 1000 > /dev/null
curl -s "$AWS_ENDPOINT_URL/MARK-schedule" >/dev/null
compactor schedule --queue-url "$q" --once --set level.trigger.files=4 2>/dev/null >/dev/null
curl -s "$AWS_ENDPOINT_URL/MARK-worker" >/dev/null
compactor worker --queue-url "$q" --exit-when-idle 2 2> worker.log
curl -s "$AWS_ENDPOINT_URL/MARK-end" >/dev/null
# moto logs each request as "METHOD /bucket/key?query HTTP/1.1"; the marks split them.
sed 's/\x1b\[[0-9;]*m//g' moto.log | awk -F'"' '
    /MARK-/ { split($2, a, " "); mark = substr(a[2], 7); next }
    mark != "" && mark != "end" && $2 ~ /compactor/ {
        split($2, a, " "); k = a[2]
        kind = (a[1] == "GET" && k ~ /list-type|uploads/) ? "LIST" : a[1]
        where = (k ~ /_catalog/) ? "catalog" : "data"
        n[mark " " kind " " where]++
    }
    END { for (x in n) print x, n[x] }' | sort
echo "jobs committed: $(grep -c job_committed worker.log)"
