# SPDX-License-Identifier: Apache-2.0
# The man page and the bash completion against the command they describe: every command,
# option and subcommand that `durable --help` lists is in the man page (and the man page lists
# no command the CLI lacks), the man page renders without warnings (when groff is installed),
# and the completion script is valid bash that completes the commands, each command's options
# and subcommands, and run ids read from a database.
#   cmake -DCLI=<durable> -DFIXTURE=<durable_ops_fixture> -DMAN=<durable.1>
#         -DCOMPLETION=<durable.bash> -DVERSION=<x.y.z> -DWORK=<scratch dir>
#         -P tests/packaging/cli_docs.cmake
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# The usage: "  COMMAND SYNOPSIS   description" lines; the synopsis ends at a run of spaces.
run("${CLI}" --help RESULT usage)
string(REPLACE ";" "," usage "${usage}")
string(REPLACE "\n" ";" usage_lines "${usage}")
set(commands)
foreach(line IN LISTS usage_lines)
  if(NOT line MATCHES "^  ([a-z][a-z-]*)( |$)")
    continue()
  endif()
  set(command ${CMAKE_MATCH_1})
  list(APPEND commands ${command})
  string(REGEX REPLACE "   .*" "" synopsis "${line}")
  string(REGEX MATCHALL "--[a-z][a-z-]*" flags_${command} "${synopsis}")
  string(REGEX MATCHALL "[[ ][a-z][a-z-]*" words "${synopsis}")
  set(subcommands_${command})
  foreach(word IN LISTS words)
    string(SUBSTRING "${word}" 1 -1 word)
    if(NOT word STREQUAL command)
      list(APPEND subcommands_${command} ${word})
    endif()
  endforeach()
endforeach()
string(REGEX MATCHALL "--[a-z][a-z-]*" all_flags "${usage}")
list(REMOVE_DUPLICATES all_flags)
list(LENGTH commands count)
if(count LESS 5)
  message(FATAL_ERROR "read only ${count} commands from durable --help:\n${usage}")
endif()

# The man page. Roff writes a hyphen in an option as \-; a command starts its .TP item in bold.
file(READ "${MAN}" man)
if(NOT man MATCHES "\n\\.TH DURABLE 1 [^\n]*\"durable ${VERSION}\"")
  message(FATAL_ERROR "${MAN}: its .TH line does not name durable ${VERSION}")
endif()
string(FIND "${man}" "\n.SH COMMANDS\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${MAN} has no COMMANDS section")
endif()
string(SUBSTRING "${man}" ${start} -1 rest)
string(SUBSTRING "${rest}" 1 -1 rest)
string(FIND "${rest}" "\n.SH " end)  # the next section
if(NOT end EQUAL -1)
  string(SUBSTRING "${rest}" 0 ${end} rest)
endif()
set(man_commands "\n${rest}")
string(REGEX MATCHALL "\n\\.TP\n\\\\fB[a-z][a-z-]*\\\\fR" man_items "${man_commands}")
set(man_listed)
foreach(item IN LISTS man_items)
  string(REGEX REPLACE ".*\\\\fB([a-z-]+)\\\\fR$" "\\1" item "${item}")
  list(APPEND man_listed ${item})
endforeach()
foreach(command IN LISTS commands)
  if(NOT command IN_LIST man_listed)
    message(FATAL_ERROR "${MAN}: command '${command}' of durable --help has no item in COMMANDS")
  endif()
  foreach(word IN LISTS subcommands_${command})
    expect_in("${man_commands}" "\\fB${word}\\fR" "${MAN}: '${command} ${word}'")
  endforeach()
endforeach()
foreach(command IN LISTS man_listed)
  if(NOT command IN_LIST commands)
    message(FATAL_ERROR "${MAN} lists a command '${command}' that durable --help does not")
  endif()
endforeach()
foreach(flag IN LISTS all_flags)
  string(REPLACE "-" "\\-" roff_flag "${flag}")
  expect_in("${man}" "${roff_flag}" "${MAN}: option ${flag} of durable --help")
endforeach()

find_program(GROFF groff)
if(GROFF)
  execute_process(COMMAND ${GROFF} -man -Tutf8 -ww -z "${MAN}" RESULT_VARIABLE rc
    ERROR_VARIABLE warnings)
  if(NOT rc EQUAL 0 OR warnings)
    message(FATAL_ERROR "groff renders ${MAN} with warnings (${rc}):\n${warnings}")
  endif()
else()
  message(STATUS "no groff here: the man page's rendering is not checked")
endif()

# The completion: sourced as bash-completion would, then called as bash calls it.
find_program(BASH bash REQUIRED)
run(${BASH} -n "${COMPLETION}")
# complete.sh FILE WORDS...: the words before the cursor are arguments, the word being completed
# is in DURABLE_COMPLETE_WORD (an empty word would not survive as an argument).
file(WRITE "${WORK}/complete.sh" [=[
source "$1" || exit 1
shift
complete -p durable | grep -q -- "-F _durable" || { echo "no completion registered"; exit 1; }
COMP_WORDS=("$@" "$DURABLE_COMPLETE_WORD")
COMP_CWORD=$#
_durable || exit 1
printf '%s\n' "${COMPREPLY[@]}"
]=])
# The words the completion offers for the word CUR after the words in ARGN.
function(complete out cur)
  set(ENV{DURABLE_COMPLETE_WORD} "${cur}")
  run(${BASH} "${WORK}/complete.sh" "${COMPLETION}" ${ARGN} RESULT offered)
  string(REPLACE "\n" ";" offered "${offered}")
  set(${out} "${offered}" PARENT_SCOPE)
endfunction()
function(expect_offered offered wanted what)
  foreach(word IN LISTS wanted)
    if(NOT word IN_LIST offered)
      message(FATAL_ERROR "completing '${what}' does not offer '${word}', only: ${offered}")
    endif()
  endforeach()
endfunction()

complete(offered "" durable)
expect_offered("${offered}" "${commands}" "durable ")
foreach(command IN LISTS offered)
  if(NOT command IN_LIST commands)
    message(FATAL_ERROR "the completion offers '${command}', which durable --help does not list")
  endif()
endforeach()
complete(offered -- durable)
expect_offered("${offered}" "--db;--json;--version" "durable --")
foreach(command IN LISTS commands)
  if(flags_${command})
    complete(offered -- durable ${command})
    expect_offered("${offered}" "${flags_${command}}" "durable ${command} --")
  endif()
  if(subcommands_${command})
    complete(offered "" durable ${command})
    list(GET subcommands_${command} 0 first)
    expect_offered("${offered}" "${first}" "durable ${command} ")
  endif()
endforeach()
complete(offered "" durable runs --status)
expect_offered("${offered}" "pending;running;sleeping;waiting;completed;failed;cancelled"
  "durable runs --status ")

# Run ids come from the database named by --db, with the command being completed.
run("${FIXTURE}" --db "${WORK}/app.db" RESULT ids)
string(JSON failed GET "${ids}" failed)
string(JSON sleeping GET "${ids}" sleeping)
complete(offered "" "${CLI}" --db "${WORK}/app.db" retry)
if(NOT offered STREQUAL failed)
  message(FATAL_ERROR "completing 'retry ' offers '${offered}', not the one failed run ${failed}")
endif()
complete(offered "" "${CLI}" --db "${WORK}/app.db" show)
expect_offered("${offered}" "${failed};${sleeping}" "durable show ")
message(STATUS "the man page and the completion cover the ${count} commands of durable --help")
