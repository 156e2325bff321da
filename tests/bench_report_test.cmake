# bench/cpu_report.py --quick: exit 0, and the report names the CPU and has every target's section
# with a verdict line or table rows (the figures themselves are not checked).
file(REMOVE ${OUT})
execute_process(COMMAND ${PY} ${SCRIPT} --attn ${ATTN} --quick --threads 1,2 --out ${OUT}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 280)
if(NOT rc EQUAL 0 OR NOT EXISTS ${OUT})
  message(FATAL_ERROR "cpu_report.py --quick failed (${rc}):\n${out}\n${err}")
endif()
file(READ ${OUT} report)
foreach(want "- CPU: `" "\\$ attn info" "## Peaks" "\\| 1 \\| [0-9.]+ \\|" "## GEMM" "\\| attn \\| [0-9.]+ \\|"
        "## fp32 flash attention" "\\| backward causal \\|" "## bf16 flash against fp32 flash"
        "## Decode with the KV cache" "\\| f32 \\| 1024 \\|" "## Training" "\\| fp32 \\| 1 \\| [0-9]+ \\|"
        "## Raw results" "\"op\": \"fma_peak\"")
  if(NOT report MATCHES "${want}")
    message(FATAL_ERROR "bench report lacks /${want}/:\n${report}")
  endif()
endforeach()
message(STATUS "ok: cpu_report.py --quick wrote every section")

# an existing file that is not an earlier report is kept (exit non-zero, nothing measured) unless
# --force; a re-run replaces the earlier report
get_filename_component(dir ${OUT} DIRECTORY)
set(notes ${dir}/bench_report_notes.txt)
file(WRITE ${notes} "my notes\n")
execute_process(COMMAND ${PY} ${SCRIPT} --attn ${ATTN} --quick --out ${notes} RESULT_VARIABLE rc ERROR_VARIABLE err
  OUTPUT_QUIET TIMEOUT 60)
file(READ ${notes} kept)
if(rc EQUAL 0 OR NOT kept STREQUAL "my notes\n" OR NOT err MATCHES "is not an earlier report.*--force")
  message(FATAL_ERROR "cpu_report.py replaced a user's file (${rc}): ${err}")
endif()
execute_process(COMMAND ${PY} ${SCRIPT} --attn ${ATTN} --quick --threads 1 --out ${OUT} RESULT_VARIABLE rc
  OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 280)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cpu_report.py did not replace its own earlier report (${rc}): ${err}")
endif()
message(STATUS "ok: a user's file kept, an earlier report replaced")

# --sittings 2: every measurement twice, each cell the best round; the report says so, and its
# fractions come from the best figures (none of its tables loses a section). 0 is refused.
execute_process(COMMAND ${PY} ${SCRIPT} --attn ${ATTN} --quick --threads 1 --sittings 2 --out ${OUT}
  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 280)
file(READ ${OUT} report)
if(NOT rc EQUAL 0 OR NOT report MATCHES "- 2 sittings, each cell the best of them" OR NOT report MATCHES "## bf16 flash against fp32 flash"
   OR NOT report MATCHES "\\| backward causal \\|" OR NOT report MATCHES "\\| f32 \\| 1024 \\| 1 \\|")
  message(FATAL_ERROR "cpu_report.py --sittings 2 failed (${rc}): ${err}\n${report}")
endif()
execute_process(COMMAND ${PY} ${SCRIPT} --attn ${ATTN} --quick --sittings 0 --out ${OUT} RESULT_VARIABLE rc
  OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 60)
if(rc EQUAL 0 OR NOT err MATCHES "--sittings must be in 1..20")
  message(FATAL_ERROR "cpu_report.py accepted --sittings 0 (${rc}): ${err}")
endif()
message(STATUS "ok: --sittings 2 reports the best round; --sittings 0 refused")
