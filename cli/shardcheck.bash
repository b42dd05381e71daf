# bash completion for shardcheck, installed as share/bash-completion/completions/shardcheck.
#
# Completes the subcommands, each one's flags, scenario files (*.yaml and directories) with the
# shipped scenarios' names, hardware profile and model preset names, and the values of the flags
# that take a fixed set. Every list comes from the binary being completed: the commands and
# names from `shardcheck help --list KIND`, the flags from `shardcheck CMD --help`, so nothing
# here repeats what the binary knows (tests/completion.sh checks the answers). Needs bash only;
# bash-completion loads it on first use.

# Runs the shardcheck being completed (the command line's first word) with its arguments.
_shardcheck_run() {
  local bin=${COMP_WORDS[0]}
  [[ $bin == \~/* ]] && bin=$HOME/${bin#\~/}
  "$bin" "$@" 2>/dev/null
}

# Adds the words of $1 that start with the current word to COMPREPLY.
_shardcheck_add() {
  local IFS=$'\n'
  COMPREPLY+=($(compgen -W "$1" -- "$cur"))
}

# Adds directories and files matching the glob $1 (e.g. '*.yaml'), as file names.
_shardcheck_files() {
  local IFS=$'\n'
  compopt -o filenames 2>/dev/null
  COMPREPLY+=($(compgen -d -- "$cur"))
  COMPREPLY+=($(compgen -f -X "!$1" -- "$cur"))
}

_shardcheck() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  local cmd=${COMP_WORDS[1]-} sub=""
  COMPREPLY=()
  if ((COMP_CWORD == 1)); then
    _shardcheck_add "$(_shardcheck_run help --list commands)"$'\n--help\n--version'
    return 0
  fi
  if [[ $cmd == model ]]; then
    if ((COMP_CWORD == 2)); then
      _shardcheck_add $'gen\ninfo\nlist'
      return 0
    fi
    sub=${COMP_WORDS[2]-}
  fi

  # the value of the flag before the cursor
  case $prev in
  --profile | --gpu)
    _shardcheck_add "$(_shardcheck_run help --list profiles)"
    [[ $prev == --profile ]] && _shardcheck_files '*.yaml'
    return 0
    ;;
  --model | -m | --preset)
    _shardcheck_add "$(_shardcheck_run help --list presets)"
    [[ $prev != --preset ]] && _shardcheck_files '*.yaml'
    return 0
    ;;
  --gpus)
    if [[ $cmd == capacity ]]; then
      _shardcheck_add "$(_shardcheck_run help --list profiles | sed 's/$/:/')"
      compopt -o nospace 2>/dev/null
    fi
    return 0
    ;;
  --mode) _shardcheck_add $'real\nsim'; return 0 ;;
  --backend) _shardcheck_add $'cpu\ncuda'; return 0 ;;
  --record) _shardcheck_add $'tokens\nrequests\nsummary'; return 0 ;;
  --isolation) _shardcheck_add $'thread\nprocess'; return 0 ;;
  --list) [[ $cmd == help ]] && _shardcheck_add $'commands\nprofiles\npresets\nscenarios'; return 0 ;;
  --db | --baseline) _shardcheck_files '*.db'; return 0 ;;
  --out | -o | --junit | --history-out) _shardcheck_files '*'; return 0 ;;
  esac

  if [[ $cur == -* ]]; then
    local help
    if [[ -n $sub ]]; then help=$(_shardcheck_run model "$sub" --help)
    else help=$(_shardcheck_run "$cmd" --help); fi
    _shardcheck_add "$(grep -oE -- '(^|[^a-z0-9-])--[a-z][a-z0-9-]+' <<<"$help" |
      sed 's/^[^-]*//' | sort -u)"
    return 0
  fi

  # positional arguments
  case $cmd in
  run | validate | capacity)
    _shardcheck_add "$(_shardcheck_run help --list scenarios)"
    _shardcheck_files '*.yaml'
    ;;
  help)
    ((COMP_CWORD == 2)) && _shardcheck_add "$(_shardcheck_run help --list commands)"$'\n--man\n--list'
    ((COMP_CWORD == 3)) && [[ $prev == model ]] && _shardcheck_add $'gen\ninfo\nlist'
    ;;
  model)
    [[ $sub == info ]] && _shardcheck_add "$(_shardcheck_run help --list presets)" &&
      _shardcheck_files '*.yaml'
    ;;
  import) _shardcheck_files '*' ;;
  esac
  return 0
}

complete -F _shardcheck shardcheck
