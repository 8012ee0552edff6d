#!/usr/bin/env bash
# agent.sh: a small agent in bash, supervised by tether through the RESP adapter.
#
#   tether child --adapter resp -- bash examples/bash-agent/agent.sh
#
# It reads USER_INPUT frames on stdin and answers each one with frames on stdout:
# THINKING, a TEXT, a real tool call (`ls -1A` in its working directory) with its
# TOOL_RESULT, USAGE and STOP tool_use; then the answer as TEXT chunks, USAGE and
# STOP end_turn. No model is called: the "thinking" is canned, the tool call is real.
# An input that asks for an answer "without calling tools" (finalize's note) is answered
# from what it has seen, without the tool.
#
# Settings (environment):
#   AGENT_STEP_DELAY  seconds to pause between steps (default 0), to watch it or steer it
#   TETHER_SHELL_LIB  tether's bash library (tether sets it; else `tether shell-lib`)

set -u
set -f # no globbing: input text is split into words below

lib=${TETHER_SHELL_LIB:-}
if [[ -z $lib ]]; then
    lib=$(tether shell-lib) || {
        printf 'agent.sh: cannot find tether.sh: put tether on PATH or set TETHER_SHELL_LIB\n' >&2
        exit 1
    }
fi
# shellcheck source=/dev/null
source "$lib" || exit 1

delay=${AGENT_STEP_DELAY:-0}
inputs=0
seen="" # what the last tool call found, for a tool-free answer

pause() {
    [[ $delay == 0 ]] || sleep "$delay"
}

# usage TEXT...: rough token counts (4 bytes a token) for the texts of one model call.
usage() {
    local LC_ALL=C all="$*"
    tether_write_msg USAGE "$((${#all} / 4 + 50))" "$((${#all} / 8 + 1))" 0 0
}

# say TEXT: stream TEXT as a few TEXT chunks, cut at spaces (never inside a character).
say() {
    local text=$1 chunk="" sep="" word IFS=' '
    for word in $text; do
        chunk+="$sep$word"
        sep=" "
        if ((${#chunk} > 24)); then
            tether_write_msg TEXT "$chunk"
            chunk=""
        fi
    done
    [[ -z $chunk ]] || tether_write_msg TEXT "$chunk"
}

progress() {
    [[ -n ${TETHER_INBOX_PATH:-${RUNEX_INBOX_PATH:-}} ]] || return 0
    tether_inbox progress "{\"text\":\"$1\"}" || true
}

answer() {
    local input=$1 id listing count names
    inputs=$((inputs + 1))
    id="call_${inputs}_$$"
    tether_write_msg THINKING "Input ${inputs}: ${input:0:200}"
    pause
    if [[ $input == *[Ww]"ithout calling tools"* ]]; then
        say "Final answer, without tools: ${seen:-I have not looked at anything yet.}"
        usage "$input"
        tether_write_msg STOP end_turn
        return
    fi
    tether_write_msg TEXT "Let me look at the working directory first."
    tether_write_msg TOOL_CALL bash "$id" '{"command":"ls -1A"}' command "ls -1A"
    listing=$(ls -1A 2>&1)
    tether_write_msg TOOL_RESULT "$id" bash "$listing"
    usage "$input"
    tether_write_msg STOP tool_use
    pause
    count=0
    [[ -z $listing ]] || count=$(printf '%s\n' "$listing" | wc -l)
    names=$(printf '%s\n' "$listing" | head -5 | paste -sd, - | sed 's/,/, /g')
    seen="$PWD has $count entries (${names:-none})."
    progress "input ${inputs}: looked at ${count} entries"
    say "You asked: ${input}"$'\n'"$seen"
    usage "$input" "$seen"
    tether_write_msg STOP end_turn
}

while true; do
    tether_read_msg
    case $? in
        0) ;;
        1) exit 0 ;; # stdin closed: the run is over
        *)
            tether_write_msg ERROR "agent.sh: a malformed input frame; stopping"
            tether_write_msg STOP error
            exit 1
            ;;
    esac
    [[ ${TETHER_MSG[0]} == USER_INPUT ]] || continue
    answer "${TETHER_MSG[2]-${TETHER_MSG[1]-}}"
done
