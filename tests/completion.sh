#!/usr/bin/env bash
# The bash completion (cli/shardcheck.bash) answers as a user at a prompt would be answered:
# each case sets the words of a command line as bash does before calling the completion
# function, and checks which words come back (and which must not).
#
# usage: tests/completion.sh SHARDCHECK SOURCE_DIR (ctest passes both)
set -uo pipefail
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$2" && pwd)
# shellcheck source=../cli/shardcheck.bash
source "$src/cli/shardcheck.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
mkdir dir
touch my-check.yaml notes.txt results.db
fails=0

# complete WORD... : COMP_WORDS = the shardcheck binary then the words, the cursor on the last.
complete_line() {
  COMP_WORDS=("$bin" "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _shardcheck
  printf '%s\n' "${COMPREPLY[@]}"
}

# expect "WORDS" has... [-- lacks...]: the completion of WORDS (split on spaces; a trailing
# space in WORDS means an empty current word) offers every `has` word and none of the `lacks`.
expect() {
  local line=$1
  shift
  local -a words
  read -r -a words <<<"$line"
  [[ -z $line || $line == *" " ]] && words+=("")
  local got
  got=$(complete_line "${words[@]}")
  local lacking=0
  for w in "$@"; do
    if [ "$w" = "--" ]; then
      lacking=1
      continue
    fi
    if [ $lacking -eq 0 ] && ! grep -qxF -- "$w" <<<"$got"; then
      echo "FAIL: 'shardcheck $line<TAB>' does not offer '$w'; offered: $(echo $got)"
      fails=$((fails + 1))
    elif [ $lacking -eq 1 ] && grep -qxF -- "$w" <<<"$got"; then
      echo "FAIL: 'shardcheck $line<TAB>' offers '$w'; offered: $(echo $got)"
      fails=$((fails + 1))
    fi
  done
}

expect "r" run runs report -- worker validate
expect "" run validate help --version -- worker
expect "--v" --version
expect "run --re" --repeat --record -- --db
expect "run --profile h" h100-sxm h200 -- a100-80g
expect "run --profile " cpu rtx5090 my-check.yaml dir -- notes.txt
expect "run --mode " real sim
expect "run quick" quickstart
expect "run cap" capacity/llama2-7b-rtx4090 capacity/llama3-8b-h100
expect "validate m" my-check.yaml mixed-prompts -- notes.txt
expect "validate " my-check.yaml dir quickstart -- notes.txt results.db
expect "plan --model llama3" llama3-70b llama3-8b llama3.1-8b -- llama-tiny
expect "plan --gpu rtx" rtx3050 rtx4090 rtx5090 -- h200
expect "plan --" --model --gpu --gpus --dtype
expect "serve -" --tensor-parallel-size --port --mode
expect "serve --backend " cpu cuda
expect "capacity --gpus rtx40" rtx4090:
expect "report --db " results.db dir -- notes.txt
expect "model " gen info list
expect "model gen --" --preset --seed --out --dtype -- --model
expect "model gen --preset llama-t" llama-tiny
expect "help " run model --man --list
expect "help --list " commands profiles presets scenarios
expect "help model " gen info list

if [ "$fails" -gt 0 ]; then
  echo "completion: $fails failure(s)"
  exit 1
fi
echo "completion: every case answered as expected"
