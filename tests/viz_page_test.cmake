# attn viz's HTML page in headless Chromium: the page's own #selftest (switches through every layer
# and head, checks what it drew) reports "ok" in the DOM, a broken page reports its script error,
# and a screenshot is not blank (tests/viz_png_check.py). Skipped, with a notice, without Chromium.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
find_program(CHROMIUM NAMES chromium chromium-browser google-chrome)
if(NOT CHROMIUM)
  message("viz_page: SKIP: chromium is not installed (apt-get install chromium)")
  return()
endif()
# --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
set(flags --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --hide-scrollbars
  --user-data-dir=${WORK}/profile)

file(WRITE ${WORK}/enc.json "{\"module\": \"transformer_encoder\", \"num_layers\": 3, \"norm\": false, \"encoder_layer\": {\"d_model\": 16, \"nhead\": 4, \"dim_feedforward\": 32, \"dropout\": 0.0}}")
execute_process(COMMAND ${ATTN} viz --config ${WORK}/enc.json --weights ${FIXTURES}/viz_run_w.safetensors
  --inputs ${FIXTURES}/viz_run_in.safetensors --rollout --html ${WORK}/page.html RESULT_VARIABLE got ERROR_VARIABLE err)
if(NOT got STREQUAL "0")
  message(FATAL_ERROR "attn viz: exit ${got}: ${err}")
endif()

function(dump_dom url outvar)
  execute_process(COMMAND ${CHROMIUM} ${flags} --virtual-time-budget=5000 --dump-dom ${url}
    RESULT_VARIABLE got OUTPUT_VARIABLE dom ERROR_VARIABLE err TIMEOUT 60)
  if(NOT got STREQUAL "0")
    message(FATAL_ERROR "chromium --dump-dom ${url}: exit ${got}: ${err}")
  endif()
  set(${outvar} "${dom}" PARENT_SCOPE)
endfunction()

dump_dom("file://${WORK}/page.html#selftest" dom)
string(REGEX MATCH "<p id=\"status\" data-status=\"[a-z]+\">[^<]*" status "${dom}")
if(NOT status MATCHES "data-status=\"ok\">selftest ok: [0-9]+ views, [0-9]+ distinct")
  message(SEND_ERROR "the page's selftest did not pass: '${status}'")
else()
  message(STATUS "ok: ${status}")
endif()
if(NOT dom MATCHES "<option value=\"3\">rollout</option>")
  message(SEND_ERROR "the layer selector lacks the rollout")
endif()

# the check sees script errors: the same page with its data cut out must not pass
file(READ ${WORK}/page.html page)
string(REPLACE "var VIZ = {" "var VIZ_GONE = {" broken "${page}")
file(WRITE ${WORK}/broken.html "${broken}")
dump_dom("file://${WORK}/broken.html#selftest" dom)
string(REGEX MATCH "<p id=\"status\" data-status=\"[a-z]+\">[^<]*" status "${dom}")
if(NOT status MATCHES "data-status=\"error\">script error: .*VIZ")
  message(SEND_ERROR "a page with a script error reported '${status}'")
else()
  message(STATUS "ok: broken page: ${status}")
endif()

execute_process(COMMAND ${CHROMIUM} ${flags} --window-size=1400,900 --screenshot=${WORK}/shot.png
  "file://${WORK}/page.html" RESULT_VARIABLE got ERROR_VARIABLE err TIMEOUT 60)
if(NOT got STREQUAL "0" OR NOT EXISTS ${WORK}/shot.png)
  message(FATAL_ERROR "chromium --screenshot: exit ${got}: ${err}")
endif()
if(NOT EXISTS ${PYTHON})
  message("viz_page: notice: ${PYTHON} is not installed - the screenshot was not checked")
  return()
endif()
execute_process(COMMAND ${PYTHON} ${CMAKE_CURRENT_LIST_DIR}/viz_png_check.py ${WORK}/shot.png
  RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(got STREQUAL "77")
  message("viz_page: notice: ${out} - the screenshot was not checked")
elseif(NOT got STREQUAL "0")
  message(SEND_ERROR "the screenshot looks blank: ${out}${err}")
else()
  message(STATUS "ok: ${out}")
endif()
