# attn demo: a short run checks the output format (progress lines, the heat maps, the last line)
# without asking for the full run's 99% (--no-accuracy-gate); then the exit codes.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# check(WHAT CONDITION...): CONDITION is an if() expression.
function(check what)
  if(${ARGN})
    message(STATUS "ok: ${what}")
  else()
    message(SEND_ERROR "demo: ${what}")
  endif()
endfunction()

set(last_line "\nheld-out exact-sequence accuracy: [0-9]+\\.[0-9]%\n$")

# 1. A short run (stdout is not a terminal: plain progress lines).
set(out_dir ${WORK}/out)
execute_process(COMMAND ${ATTN} demo --steps 60 --max-len 6 --eval 120 --log-every 10
    --out ${out_dir} --no-accuracy-gate
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message(STATUS "output:\n${out}${err}")
check("short run exits 0 with --no-accuracy-gate (got ${rc})" rc STREQUAL "0")
string(REGEX MATCHALL
  "step [0-9]+/60  loss [0-9.]+  acc +[0-9.]+%  [0-9]+ tok/s  elapsed [0-9:]+  ETA [0-9:]+\n"
  progress "${out}")
list(LENGTH progress n_progress)
check("six plain progress lines, one per 10 steps (got ${n_progress})" n_progress EQUAL 6)
check("no carriage returns when stdout is not a terminal" NOT out MATCHES "\r")
check("held-out examples are printed" out MATCHES "held-out examples")
check("example lines: input, expected, answer, ok/WRONG" out MATCHES "\n  [0-9]+ +[0-9]+ +[^\n]*(ok|WRONG)\n")
check("says where the heat maps went"
  out MATCHES "written to [^\n]*cross_attention\\.svg and [^\n]*cross_attention\\.html\n")
check("last line is the accuracy" out MATCHES "${last_line}")

# 2. The heat maps: a standalone SVG and a self-contained HTML page.
set(svg ${out_dir}/cross_attention.svg)
set(html ${out_dir}/cross_attention.html)
check("SVG written" EXISTS ${svg})
check("HTML written" EXISTS ${html})
if(EXISTS ${svg} AND EXISTS ${html})
  file(READ ${svg} s)
  file(READ ${html} h)
  check("SVG starts with <svg xmlns=...>" s MATCHES "^<\\?xml[^\n]*\n<svg xmlns=\"http://www.w3.org/2000/svg\"")
  check("SVG ends with </svg>" s MATCHES "</svg>\n$")
  string(REGEX MATCHALL "<rect class=\"cell\"" cells "${s}")
  list(LENGTH cells n_cells)
  # the drawn example is the longest one shown (max-len 6): 7 output rows x 6 input columns
  check("7 x 6 heat-map cells (got ${n_cells})" n_cells EQUAL 42)
  string(REGEX MATCHALL "<text class=\"col\"[^>]*>[0-9]</text>" cols "${s}")
  list(LENGTH cols n_cols)
  check("6 input-token labels (got ${n_cols})" n_cols EQUAL 6)
  string(REGEX MATCHALL "<text class=\"row\"[^>]*>[^<]+</text>" rows "${s}")
  list(LENGTH rows n_rows)
  check("7 output-token labels (got ${n_rows})" n_rows EQUAL 7)
  check("HTML doctype" h MATCHES "^<!DOCTYPE html>")
  check("HTML embeds the SVG" h MATCHES "<svg xmlns" AND h MATCHES "</html>\n$")
  check("HTML is self-contained" NOT h MATCHES "(src|href)=" AND NOT h MATCHES "@import"
    AND NOT h MATCHES "url\\(")
endif()

# 3. Exit codes: without --no-accuracy-gate a short (untrained) run fails but still ends with
#    the accuracy line; bad arguments are one-line usage errors with exit 2.
execute_process(COMMAND ${ATTN} demo --steps 5 --max-len 5 --eval 20 --out ${WORK}/gate
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
check("an untrained model exits 1 (got ${rc})" rc STREQUAL "1")
check("and still prints the accuracy last" out MATCHES "${last_line}")

execute_process(COMMAND ${ATTN} demo --help RESULT_VARIABLE rc OUTPUT_VARIABLE out)
foreach(opt --steps --seed --min-len --max-len --out --threads --no-accuracy-gate)
  check("--help lists ${opt}" rc STREQUAL "0" AND out MATCHES "\n  ${opt} ")
endforeach()

foreach(bad "--bogus" "--steps;abc" "--steps" "--min-len;8;--max-len;4" "--threads;0" "--heads;3")
  execute_process(COMMAND ${ATTN} demo ${bad} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines n)
  check("attn demo ${bad} -> exit 2 (got ${rc}), one line: ${err}"
    rc STREQUAL "2" AND n EQUAL 1 AND err MATCHES "^attn: demo: " AND NOT out MATCHES ".")
endforeach()

# 4. --svg goes through the safe output: an existing file that is not an SVG is refused before
#    training (one line, exit 1, the file unchanged); --force replaces it; a fresh path is written.
file(WRITE ${WORK}/notes.txt "my notes\n")
execute_process(COMMAND ${ATTN} demo --steps 1 --min-len 2 --max-len 3 --eval 1 --out ${WORK}/svgout --no-accuracy-gate
    --svg ${WORK}/notes.txt
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
file(READ ${WORK}/notes.txt notes)
check("--svg over a text file -> exit 1 before training (got ${rc}: ${out}${err})"
  rc STREQUAL "1" AND NOT out MATCHES "step" AND err MATCHES
  "^attn: demo: --svg '[^']*notes.txt' exists and is not an SVG file: refusing to replace it \\(remove it, choose another path, or add --force\\)\n$"
  AND notes STREQUAL "my notes\n")
execute_process(COMMAND ${ATTN} demo --steps 1 --min-len 2 --max-len 3 --eval 1 --out ${WORK}/svgout --no-accuracy-gate
    --svg ${WORK}/notes.txt --force
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
file(READ ${WORK}/notes.txt notes)
check("--svg over a text file with --force -> exit 0, an SVG (got ${rc}: ${err})"
  rc STREQUAL "0" AND notes MATCHES "^<\\?xml[^\n]*\n<svg xmlns=" AND out MATCHES "written to [^\n]*notes.txt and")
execute_process(COMMAND ${ATTN} demo --steps 1 --min-len 2 --max-len 3 --eval 1 --out ${WORK}/svgout --no-accuracy-gate
    --svg ${WORK}/fresh.svg
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
check("--svg to a fresh path -> exit 0 and the SVG there (got ${rc}: ${err})"
  rc STREQUAL "0" AND EXISTS ${WORK}/fresh.svg AND NOT EXISTS ${WORK}/svgout/cross_attention.svg)
