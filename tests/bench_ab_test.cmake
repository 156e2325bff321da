# bench/ab.py: two tiny attn bench commands alternated; one row per shared cell with both sides'
# best figures and the median ratio in brackets of its quartiles; environment words apply; a
# failing command, commands with no cell in common and --rounds 0 exit non-zero with a message.
execute_process(COMMAND ${PY} ${SCRIPT} --rounds 2
  --a "ATTN_FLASH_ROWS=4 ${ATTN} bench attention --n 64 --d 16 --repeats 5 --threads 1"
  --b "ATTN_FLASH_ROWS=6 ${ATTN} bench attention --n 64 --d 16 --repeats 5 --threads 1 --backward"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0 OR NOT out MATCHES "2 rounds" OR
   NOT out MATCHES "attention forward flash b=1 d=16 h=8 n=64 t=1 +gflops +[0-9.]+ +[0-9.]+ +[0-9.]+ \\[[0-9.]+ [0-9.]+\\]"
   OR out MATCHES "backward")
  message(FATAL_ERROR "ab.py on two attention runs (${rc}):\n${out}\n${err}")
endif()
# ab.py with the given arguments must exit non-zero with a message matching want
function(expect_refused what want)
  execute_process(COMMAND ${PY} ${SCRIPT} ${ARGN} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 60)
  if(rc EQUAL 0 OR NOT err MATCHES "${want}")
    message(FATAL_ERROR "ab.py accepted ${what} (${rc}): ${err}")
  endif()
endfunction()
expect_refused("a failing command" "failed" --rounds 1 --a "${ATTN} bench nosuch" --b "${ATTN} bench peak")
expect_refused("commands with no cell in common" "share no cell" --rounds 1 --a "${ATTN} bench peak --threads 1"
  --b "${ATTN} bench gemm --m 16 --threads 1")
expect_refused("--rounds 0" "--rounds must be" --rounds 0 --a "${ATTN} bench peak" --b "${ATTN} bench peak")
message(STATUS "ok: ab.py alternates, matches cells, reports ratios; bad commands refused")
