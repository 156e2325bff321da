# The attn CLI: exit codes (0 ok, 1 failure, 2 usage), one-line errors, --help everywhere.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(failures 0)

# expect(RC REGEX args...): run attn with args, check the exit code and that stdout+stderr match.
function(expect rc regex)
  execute_process(COMMAND ${ATTN} ${ARGN} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err
    TIMEOUT 300)
  set(all "${out}${err}")
  if(NOT got STREQUAL "${rc}" OR NOT all MATCHES "${regex}")
    message(SEND_ERROR "attn ${ARGN}: exit ${got} (want ${rc}), output:\n${all}\n(want /${regex}/)")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${got}")
  endif()
endfunction()

# expect_one_line_error(RC args...): exactly one line on stderr starting with "attn: ".
function(expect_one_line_error rc)
  execute_process(COMMAND ${ATTN} ${ARGN} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines n)
  if(NOT got STREQUAL "${rc}" OR NOT n EQUAL 1 OR NOT err MATCHES "^attn: ")
    message(SEND_ERROR "attn ${ARGN}: exit ${got} (want ${rc}), stderr (want one 'attn: ' line):\n${err}")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${got}: ${err}")
  endif()
endfunction()

expect(0 "usage: attn" --help)
expect(0 "attn [0-9]+\\.[0-9]+" --version)
expect(2 "usage: attn")
expect(2 "unknown command 'frobnicate'" frobnicate)
foreach(cmd info inspect bench demo run)
  expect(0 "usage: attn ${cmd}" ${cmd} --help)
endforeach()
foreach(sub peak gemm attention)
  expect(0 "usage: attn bench ${sub}" bench ${sub} --help)
endforeach()
expect(0 "kernels: +(ref|avx2|avx512)" info)
set(ENV{ATTN_ISA} ref)
expect(0 "kernels: +ref" info)
unset(ENV{ATTN_ISA})
expect(2 "info: unknown option '--bogus'" info --bogus)
expect(2 "info: unexpected argument 'extra'" info extra)

# inspect: a good file, then hostile ones
expect(0 "case0\\.q.*F32.*parameters" inspect ${FIXTURES}/sdpa.safetensors)
expect_one_line_error(2 inspect)
expect_one_line_error(1 inspect ${WORK}/does-not-exist.safetensors)
file(WRITE ${WORK}/short.safetensors "abc")
expect_one_line_error(1 inspect ${WORK}/short.safetensors)
execute_process(COMMAND head -c -100 ${FIXTURES}/sdpa.safetensors OUTPUT_FILE ${WORK}/cut.safetensors)
expect_one_line_error(1 inspect ${WORK}/cut.safetensors)
file(WRITE ${WORK}/huge.safetensors "ffffffff{}")
expect_one_line_error(1 inspect ${WORK}/huge.safetensors)

# benchmarks: bad arguments are usage errors; tiny runs produce the documented JSON keys
expect_one_line_error(2 bench gemm --m abc)
expect_one_line_error(2 bench gemm --threads 0)
expect_one_line_error(2 bench attention --impl nonsense)
expect_one_line_error(2 bench nonsense)
expect(0 "\"op\": *\"gemm\".*\"impl\".*\"shape\".*\"threads\".*\"ms\".*\"gflops\".*\"peak_fraction\""
  bench gemm --m 64 --threads 1 --json)
expect(0 "\"op\": *\"attention\".*\"impl\": *\"sdpa\".*\"gflops\".*\"peak_fraction\""
  bench attention --impl sdpa --b 1 --h 2 --n 64 --d 16 --threads 1 --json)
expect(0 "GFLOP/s" bench attention --impl sdpa --b 1 --h 1 --n 32,48 --d 16 --causal --backward --threads 1,2)
expect(0 "\"variant\": *\"forward causal window\".*\"window\": *16" bench attention --b 1 --h 1 --n 128 --d 16 --window 16 --causal --threads 1 --json)
expect_one_line_error(2 bench attention --window -3)
