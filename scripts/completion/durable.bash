# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Bash completion for the durable command (runtime/cli.cpp): its commands, their options and
# subcommands, statuses, and the ids of runs and schedules read from the database named by
# --db. Installed as share/bash-completion/completions/durable; or `source` this file. It needs
# nothing from the bash-completion package. The test cli_man_page_and_completion checks it
# against `durable --help`.

# The ids in the first column of what `durable [--db FILE] runs|schedules ...` prints: run ids
# (28 hex digits) or schedule ids (every row under the ID header).
_durable_ids() {
  local kind=$1 program=$2
  shift 2
  "$program" "$@" 2>/dev/null | awk -v kind="$kind" '
    kind == "runs" && length($1) == 28 && $1 ~ /^[0-9a-f]+$/ { print $1 }
    kind == "schedules" && header { print $1 }
    $1 == "ID" { header = 1 }'
}

_durable() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local prev=""
  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
  local program=${COMP_WORDS[0]/#\~/$HOME}
  COMPREPLY=()

  # As the command reads its line: every --flag but --json takes the next word as its value;
  # the first other word is the command, the rest its arguments.
  local command="" db=() args=() i=1
  while ((i < COMP_CWORD)); do
    local word=${COMP_WORDS[i]}
    case $word in
      --json) ;;
      --db)
        ((i + 1 < COMP_CWORD)) && db=(--db "${COMP_WORDS[i + 1]/#\~/$HOME}")
        ((i++))
        ;;
      --*) ((i++)) ;;
      *) if [[ -z $command ]]; then command=$word; else args+=("$word"); fi ;;
    esac
    ((i++))
  done

  case $prev in
    --db | --key-file | --tls-cert | --tls-key | --signing-secret-file)
      compopt -o filenames 2>/dev/null  # a / after directories, names quoted
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      return
      ;;
    --status)
      mapfile -t COMPREPLY < <(compgen -W "pending running sleeping waiting paused completed failed cancelled" -- "$cur")
      return
      ;;
    --address)
      mapfile -t COMPREPLY < <(compgen -W "127.0.0.1 localhost ::1 0.0.0.0 ::" -- "$cur")
      return
      ;;
    --older-than)
      mapfile -t COMPREPLY < <(compgen -W "1d 7d 30d" -- "$cur")
      return
      ;;
    --workflow | --correlation | --limit | --after | --input | --key | --data | --reason | --port | --token | \
      --from | --output | --tag | --priority | --deadline | --failed-step | --error-type | --since | \
      --until)
      return  # a value of the user's own
      ;;
  esac

  local flags=""
  case $command in
    "") flags="--db --key-file --json --help --version" ;;
    runs) flags="--status --workflow --correlation --tag --limit --after" ;;
    cancel) flags="--reason --status --workflow --correlation --tag --failed-step --error-type --since --until --dry-run --all" ;;
    retry | purge) flags="--status --workflow --correlation --tag --failed-step --error-type --since --until --dry-run --all" ;;
    pause | resume) flags="--workflow" ;;
    fork) flags="--from" ;;
    resolve) flags="--output --reason" ;;
    verify) flags="--workflow --status --correlation" ;;
    start) flags="--input --key --correlation --priority --tag --deadline" ;;
    send) flags="--data" ;;
    published) flags="--wait" ;;
    tail) flags="--from" ;;
    send | message) flags="--data" ;;
    events) flags="--older-than" ;;
    serve) flags="--address --port --token --tls-cert --tls-key --signing-secret-file" ;;
  esac
  if [[ $cur == -* ]]; then
    [[ -n $command ]] && flags+=" --db --key-file --json"
    mapfile -t COMPREPLY < <(compgen -W "$flags" -- "$cur")
    return
  fi

  local words=""
  case $command in
    "") words="runs show steps retry cancel purge pause resume fork resolve start send published tail message stats schedules metrics events serve verify forget version" ;;
    show | steps | cancel | pause | resume | fork | published | tail | message)
      ((${#args[@]} == 0)) && words=$(_durable_ids runs "$program" "${db[@]}" runs --limit 50)
      ;;
    retry | resolve)
      ((${#args[@]} == 0)) &&
        words=$(_durable_ids runs "$program" "${db[@]}" runs --status failed --limit 50)
      ;;
    schedules)
      if ((${#args[@]} == 0)); then
        words="remove"
      elif [[ ${#args[@]} -eq 1 && ${args[0]} == remove ]]; then
        words=$(_durable_ids schedules "$program" "${db[@]}" schedules)
      fi
      ;;
    events) ((${#args[@]} == 0)) && words="purge" ;;
  esac
  [[ -n $words ]] && mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
  return 0
}

complete -F _durable durable
