# tether.sh: bash helpers for agents supervised by tether.
#
#   source "$(tether shell-lib)"
#   tether_write_msg TEXT "hello"                       # one RESP-like frame on stdout
#   tether_inbox progress '{"text":"step 3 of 5"}'      # one line in the run's inbox
#   while tether_read_msg; do ...; done                 # frames from stdin into TETHER_MSG
#
# Plain bash (4.2 or later) and coreutils. Bash's own printf and echo write stdout line by
# line (one write(2) per line), so a frame holding CR/LF would reach a shared pipe or file in
# pieces; these helpers build the whole frame or line in memory and hand it to dd, which
# writes it with a single write(2). On Linux, one write to a file opened for appending is
# never interleaved with another writer's, nor is one write of up to PIPE_BUF (4096) bytes
# to a pipe.
#
# Bash arguments cannot hold NUL bytes; everything else (UTF-8, CR, LF, empty fields) is
# carried byte for byte.

# tether_write_msg TYPE [FIELD...]
#   Write one frame to stdout: "*<N>\r\n", then per argument "$<byte length>\r\n<bytes>\r\n".
#   Field 0 is the message type (TEXT, THINKING, TOOL_CALL, TOOL_RESULT, USAGE,
#   SUB_AGENT_RESULT, STOP, CONTEXT_UPDATE, ERROR, RETRY). Returns dd's status.
tether_write_msg() {
    if (($# < 1)); then
        printf 'tether_write_msg: usage: tether_write_msg TYPE [FIELD...]\n' >&2
        return 2
    fi
    local LC_ALL=C # ${#var} counts bytes, not characters
    local _tether_frame _tether_field _tether_part
    printf -v _tether_frame '*%d\r\n' "$#"
    for _tether_field in "$@"; do
        printf -v _tether_part '$%d\r\n%s\r\n' "${#_tether_field}" "$_tether_field"
        _tether_frame+=$_tether_part
    done
    _tether_write_once "$_tether_frame"
}

# tether_inbox TYPE [JSON]
#   Append one JSON line to the run's inbox: "$TETHER_INBOX_PATH", or "$RUNEX_INBOX_PATH"
#   when that is unset. JSON must be an object (default {}); TYPE goes in front as its
#   "type" member, so leave "type" out of JSON. Newlines in JSON are turned into spaces
#   (outside strings they are only whitespace; inside strings JSON forbids them). The
#   JSON itself is not validated here: the drain rejects and logs a bad line.
#     tether_inbox progress '{"text":"step 3"}'  ->  {"type":"progress","text":"step 3"}
tether_inbox() {
    if (($# < 1 || $# > 2)); then
        printf 'tether_inbox: usage: tether_inbox TYPE [JSON-OBJECT]\n' >&2
        return 2
    fi
    local _tether_path=${TETHER_INBOX_PATH:-${RUNEX_INBOX_PATH:-}}
    if [[ -z $_tether_path ]]; then
        printf 'tether_inbox: neither TETHER_INBOX_PATH nor RUNEX_INBOX_PATH is set; ' >&2
        printf 'run this under tether, or set one of them to the inbox file\n' >&2
        return 1
    fi
    local LC_ALL=C
    local _tether_json=${2:-"{}"} _tether_type _tether_rest
    _tether_json=${_tether_json//$'\r'/ }
    _tether_json=${_tether_json//$'\n'/ }
    _tether_json=${_tether_json#"${_tether_json%%[![:space:]]*}"}
    if [[ ${_tether_json:0:1} != "{" ]]; then
        printf 'tether_inbox: JSON must be an object like {"text":"..."}, got: %.60s\n' \
            "$_tether_json" >&2
        return 2
    fi
    _tether_rest=${_tether_json:1}
    _tether_rest=${_tether_rest#"${_tether_rest%%[![:space:]]*}"}
    _tether_json_string "$1" _tether_type
    if [[ ${_tether_rest:0:1} == "}" ]]; then
        _tether_json="{\"type\":$_tether_type$_tether_rest"
    else
        _tether_json="{\"type\":$_tether_type,$_tether_rest"
    fi
    if [[ ! -e $_tether_path ]]; then
        (umask 077 && : >>"$_tether_path") || return 1
    fi
    _tether_write_once "$_tether_json"$'\n' >>"$_tether_path"
}

# _tether_write_once STRING: write STRING to stdout with one write(2).
_tether_write_once() {
    local LC_ALL=C
    dd bs="${#1}" count=1 iflag=fullblock status=none <<<"$1"
}

# _tether_json_string TEXT VAR: set VAR to TEXT as a JSON string literal.
_tether_json_string() {
    local LC_ALL=C
    local _s=$1 _out="" _ch _i
    _s=${_s//\\/\\\\}
    _s=${_s//\"/\\\"}
    _s=${_s//$'\n'/\\n}
    _s=${_s//$'\r'/\\r}
    _s=${_s//$'\t'/\\t}
    if [[ $_s == *[$'\x01'-$'\x1f']* ]]; then
        for ((_i = 0; _i < ${#_s}; _i++)); do
            _ch=${_s:_i:1}
            if [[ $_ch == [$'\x01'-$'\x1f'] ]]; then
                printf -v _ch '\\u%04x' "'$_ch"
            fi
            _out+=$_ch
        done
        _s=$_out
    fi
    printf -v "$2" '"%s"' "$_s"
}

# tether_read_msg
#   Read one frame from stdin into the array TETHER_MSG (TETHER_MSG[0] is the type; under
#   `tether child --adapter resp` the input is USER_INPUT, "0", the text). Fields are read
#   byte for byte (CR, LF, UTF-8 and empty fields included). Returns 0 after a frame, 1 at
#   the end of input (nothing read), 2 on a malformed or cut-short frame: the stream is then
#   out of step, so stop reading. A NUL byte cannot be held by bash and counts as malformed.
tether_read_msg() {
    local LC_ALL=C # read -N counts bytes, not characters
    local _tether_line _tether_count _tether_len _tether_i _tether_field _tether_end
    TETHER_MSG=()
    IFS= read -r _tether_line || return 1
    _tether_line=${_tether_line%$'\r'}
    [[ $_tether_line =~ ^\*(0|[1-9][0-9]{0,5})$ ]] || return 2
    _tether_count=${BASH_REMATCH[1]}
    for ((_tether_i = 0; _tether_i < _tether_count; _tether_i++)); do
        IFS= read -r _tether_line || return 2
        _tether_line=${_tether_line%$'\r'}
        [[ $_tether_line =~ ^\$(0|[1-9][0-9]{0,9})$ ]] || return 2
        _tether_len=${BASH_REMATCH[1]}
        _tether_field=""
        if ((_tether_len > 0)); then
            IFS= read -r -d '' -N "$_tether_len" _tether_field || return 2
            ((${#_tether_field} == _tether_len)) || return 2
        fi
        IFS= read -r -d '' -N 2 _tether_end || return 2
        [[ $_tether_end == $'\r\n' ]] || return 2
        TETHER_MSG+=("$_tether_field")
    done
    return 0
}
