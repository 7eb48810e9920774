# Runs px_comm_mpi_failure_test under mpirun for each case: rank 1 of 3 is
# killed or frozen mid-allreduce; passes when the launch ends non-zero within
# the time limit and both survivors (ranks 0 and 2) printed an error naming
# the collective, the step and a peer rank, within the timeout plus slack,
# and at least one of them named rank 1 itself (the other may name a
# neighbour that gave up on rank 1 at the same moment). When mpirun tore a
# "kill" launch down itself (below), one survivor's error is enough.
# Usage: cmake -DMPIEXEC=mpirun "-DMPIEXEC_FLAGS=--allow-run-as-root;--oversubscribe"
#          -DPROGRAM=px_comm_mpi_failure_test -P mpi_failure_test.cmake
set(timeout_ms 1000)
# A rank killed while its peers exchange point-to-point messages (ring) was
# flaky: about one launch in five, OpenMPI tore the whole job down before the
# survivors reported. A kill is therefore tested on shared_memory (no MPI
# traffic at the moment of death) and ring is tested with a freeze.
set(cases "freeze ring" "kill shared_memory" "freeze halving_doubling" "freeze tree")
set(failures 0)
foreach(case IN LISTS cases)
  separate_arguments(words UNIX_COMMAND "${case}")
  list(GET words 0 mode)
  list(GET words 1 algorithm)
  string(TIMESTAMP began "%s")
  execute_process(
    COMMAND ${MPIEXEC} ${MPIEXEC_FLAGS} -np 3
            ${PROGRAM} ${mode} ${algorithm} ${timeout_ms}
    OUTPUT_VARIABLE output ERROR_VARIABLE errors RESULT_VARIABLE status
    TIMEOUT 25)
  string(TIMESTAMP ended "%s")
  math(EXPR elapsed "${ended} - ${began}")
  message(STATUS "${case}: exit '${status}' after ~${elapsed} s\n${output}")
  set(problems "")
  if(status STREQUAL "0" OR status MATCHES "timeout")
    list(APPEND problems "mpirun exit status '${status}', expected non-zero within 25 s")
  endif()
  set(named_victim FALSE)
  set(silent_survivors 0)
  foreach(rank 0 2)
    string(REGEX MATCH "survivor rank ${rank} failed after ([0-9.]+) s: ([^\n]*)" line "${output}")
    if(NOT line)
      math(EXPR silent_survivors "${silent_survivors} + 1")
      continue()
    endif()
    set(seconds "${CMAKE_MATCH_1}")
    set(error "${CMAKE_MATCH_2}")
    if(NOT error MATCHES "^allreduce\\(${algorithm}\\)[^:]* step [0-9]+ on rank ${rank}")
      list(APPEND problems "rank ${rank}'s error does not name allreduce(${algorithm}) and the step: ${error}")
    endif()
    if(NOT error MATCHES "peer rank [0-9]+ [^:]*within the ${timeout_ms} ms timeout")
      list(APPEND problems "rank ${rank}'s error does not name the silent peer: ${error}")
    endif()
    if(error MATCHES "peer rank 1 ")
      set(named_victim TRUE)
    endif()
    if(NOT seconds LESS 3.5)  # timeout 1 s; the later survivor may wait for the earlier one
      list(APPEND problems "rank ${rank} failed only after ${seconds} s")
    endif()
  endforeach()
  # A killed victim: the launcher itself, seeing rank 1 die by SIGKILL, may
  # tear the job down within the survivors' timeout (OpenMPI's mpirun now
  # and then: 4 launches of 13 on 2026-11-22; MPICH's hydra always), so a
  # survivor may be killed before it reports. That is the launcher ending
  # the job, not a hang: the survivors' errors are then optional, provided
  # the launcher reported the signal. Frozen victims leave the launcher
  # nothing to notice, so there both survivors must report.
  set(launcher_ended_job FALSE)
  if(mode STREQUAL "kill" AND "${output}${errors}" MATCHES
     "process rank 1 [^\n]*exited on signal 9|EXIT STRING: Killed \\(signal 9\\)")
    set(launcher_ended_job TRUE)
  endif()
  if(silent_survivors GREATER 0 AND NOT launcher_ended_job)
    list(APPEND problems "${silent_survivors} of the 2 survivors printed no error")
  endif()
  if(NOT named_victim AND silent_survivors LESS 2)
    list(APPEND problems "no survivor named rank 1")
  endif()
  if(problems)
    math(EXPR failures "${failures} + 1")
    string(REPLACE ";" "\n  " problems "${problems}")
    message("FAILED ${case}:\n  ${problems}\n${errors}")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "${failures} of the failure cases went wrong")
endif()
