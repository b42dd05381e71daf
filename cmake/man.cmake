# Writes OUT (shardcheck.1.gz) from `BIN help --man`: the manual page is the binary's own --help
# texts (cli/main.c), so it is made by running the binary that was just built. gzip -n: no name
# or time stamp inside, so the same binary gives the same file.
execute_process(COMMAND ${BIN} help --man COMMAND gzip -9n OUTPUT_FILE ${OUT}.tmp
                RESULTS_VARIABLE rcs)
foreach(rc ${rcs})
  if(NOT rc EQUAL 0)
    file(REMOVE ${OUT}.tmp)
    message(FATAL_ERROR "`${BIN} help --man | gzip` failed: ${rcs}")
  endif()
endforeach()
file(RENAME ${OUT}.tmp ${OUT})
