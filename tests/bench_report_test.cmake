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
