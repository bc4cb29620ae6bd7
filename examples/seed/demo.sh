#!/usr/bin/env bash
# The seed's worked examples (docs/contracts.md) run through the treadle CLI. Usage: demo.sh TREADLE
set -u
treadle="${1:-treadle}"
here="$(cd "$(dirname "$0")" && pwd)"
status=0

show() {  # show TITLE EXPECTED_EXIT COMMAND...
  local title="$1" expected="$2"; shift 2
  printf '\n\033[1m== %s\033[0m\n$ treadle %s\n' "$title" "${*/#$here\//}"
  "$treadle" "$@"
  local got=$?
  if [ "$got" -ne "$expected" ]; then
    echo "!! expected exit $expected, got $got"; status=1
  fi
}

cd "$here"
show "1. Two branches: head 'new' -> path root, a, new (never 'old')" 0 path 1_branches.jsonl --head new
show "2. Actions x, y of one response r -> ONE assistant message with calls [cx, cy] (raw)" 0 project 3_out_of_order.jsonl --raw
show "2. ...and once both have results, followed by their two tool messages" 0 project 2_parallel_calls.jsonl
show "3. Observation of y arrived first -> pending is exactly {x}" 0 audit 3_out_of_order.jsonl
show "4. Fault: a missing parent -> TREE-MISSING" 1 audit 4a_missing_parent.jsonl
show "4. Fault: a cycle -> TREE-CYCLE" 1 audit 4b_cycle.jsonl
show "4. Fault: a repeated call id inside one response -> PROJECT-DUP-CALL" 1 audit 4c_dup_call_in_response.jsonl
show "4. Fault: a repeated call id across responses -> LINK-UNIQUE" 1 audit 4d_dup_call_across_responses.jsonl
show "4. Fault: an observation pointing at the wrong action -> LINK-ID" 1 audit 4e_wrong_action.jsonl
echo
[ "$status" -eq 0 ] && echo "All worked examples behaved as the seed says." || echo "Some examples did not behave as expected."
exit "$status"
