# attn viz and attn sample on hostile texts and non-finite weights, and every output checked before
# any work: a --title and a checkpoint name with control bytes and invalid UTF-8 (the outputs parsed
# by viz_text_check.py: SVG as XML), a checkpoint with a NaN weight (valid checksum: sample refuses
# it naming the tensor; viz shows NaN cells as NaN, never zeros), outputs naming one file twice, an
# input, or a missing folder (refused before anything is written).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect rc regex)
  execute_process(COMMAND ${ATTN} ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE got OUTPUT_VARIABLE out
    ERROR_VARIABLE err TIMEOUT 120)
  if(NOT got STREQUAL "${rc}" OR NOT "${out}${err}" MATCHES "${regex}")
    message(SEND_ERROR "attn ${ARGN}: exit ${got} (want ${rc}), output:\n${out}${err}\n(want /${regex}/)")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${got}")
  endif()
endfunction()

# exactly one line on stderr, "attn: ..." matching regex, exit 1, nothing on stdout
function(expect_error regex)
  execute_process(COMMAND ${ATTN} ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE got OUTPUT_VARIABLE out
    ERROR_VARIABLE err TIMEOUT 120)
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines n)
  if(NOT got STREQUAL "1" OR NOT n EQUAL 1 OR NOT err MATCHES "^attn: " OR NOT err MATCHES "${regex}"
     OR NOT out STREQUAL "")
    message(SEND_ERROR "attn ${ARGN}: exit ${got} (want 1), stdout:\n${out}\nstderr (want one line /${regex}/):\n${err}")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${got}: ${err}")
  endif()
endfunction()

function(expect_file path regex)
  file(READ ${path} text)
  if(NOT text MATCHES "${regex}")
    message(SEND_ERROR "${path} does not match /${regex}/")
  endif()
endfunction()

function(expect_none)
  foreach(glob ${ARGN})
    file(GLOB found ${WORK}/${glob})
    if(found)
      message(SEND_ERROR "written although an output was refused: ${found}")
    endif()
  endforeach()
endfunction()

string(REPEAT "the quick brown fox jumps over the lazy dog. " 20 fox)
file(WRITE ${WORK}/fox.txt "${fox}")
expect(0 "checkpoint: gpt.safetensors" train gpt --data fox.txt --layers 2 --heads 2 --d-model 16 --context 32
  --batch 4 --threads 2 --steps 3 --checkpoint gpt.safetensors)

# hostile texts: the outputs parsed (SVG by xml.etree) and compared with the rule
if(EXISTS ${PYTHON})
  execute_process(COMMAND ${PYTHON} ${SCRIPT} ${ATTN} ${WORK} ${WORK}/gpt.safetensors RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  message(STATUS "${out}${err}")
  if(NOT rc EQUAL 0)
    message(SEND_ERROR "viz_text_check.py failed (exit ${rc})")
  endif()
else()
  message(STATUS "viz_text: ${PYTHON} absent: the XML parse of the outputs is skipped")
endif()

# a NaN in the embedding of 'b' (byte 98, element 3; the checksum recomputed): sample refuses,
# viz shows the rows that see 'b' as NaN (row 'a' is finite: causal)
execute_process(COMMAND ${NONFINITE_HELPER} --set gpt.safetensors nan.safetensors tok_emb.weight 1571 nan
  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "test_nonfinite --set failed")
endif()
expect_error("sample: nan.safetensors: 1 weight tensor is not finite: 'tok_emb.weight' \\(1 NaN, 0 Inf\\)"
  sample nan.safetensors --prompt abc --tokens 5)
expect_error("'tok_emb.weight'" sample nan.safetensors --prompt xyz --tokens 5 --temperature 0)
expect(0 "wrote n.svg\nwrote n.html\nwrote n.csv" viz --checkpoint nan.safetensors --text abc --layer 0 --head 0
  --svg n.svg --html n.html --csv n.csv)
expect_file(${WORK}/n.csv "\n0,\"layers.0.self_attn\",0,0,0,0,\"a\",\"a\",1\n")
expect_file(${WORK}/n.csv "\"b\",\"a\",NaN\n.*\"c\",\"c\",NaN\n$")
expect_file(${WORK}/n.svg "<title>b -&gt; a: NaN</title>.*>NaN</text>")
expect_file(${WORK}/n.html "\"w\": \\[1,0,0,NaN,NaN,NaN,NaN,NaN,NaN\\]")
expect(0 "wrote f.csv" viz --checkpoint gpt.safetensors --text abc --csv f.csv)
file(READ ${WORK}/f.csv finite)
if(finite MATCHES "NaN")
  message(SEND_ERROR "NaN in the finite checkpoint's maps")
endif()

# every output checked before any work: nothing written when one is refused
file(SHA256 ${WORK}/gpt.safetensors before)
expect_error("viz: --html and --svg name the same file 'X'" viz --checkpoint gpt.safetensors --text abc --svg X --html X)
expect_error("viz: --csv and --svg name the same file './s.csv'" viz --checkpoint gpt.safetensors --text abc
  --csv s.csv --svg ./s.csv)
expect_error("viz: --html 'gpt.safetensors' is the same file as the input 'gpt.safetensors'" viz
  --checkpoint gpt.safetensors --text abc --svg s1.svg --html gpt.safetensors --force)
expect_error("viz: --csv: cannot create a temporary file next to 'nodir/x.csv'" viz --checkpoint gpt.safetensors
  --text abc --svg s2.svg --csv nodir/x.csv)
expect_none(X s.csv s1*.svg s2*.svg)
file(SHA256 ${WORK}/gpt.safetensors after)
if(NOT before STREQUAL after)
  message(SEND_ERROR "a refused output changed the checkpoint")
endif()
file(WRITE ${WORK}/enc.json "{\"module\": \"transformer_encoder\", \"num_layers\": 3, \"norm\": false, \"encoder_layer\": {\"d_model\": 16, \"nhead\": 4, \"dim_feedforward\": 32, \"dropout\": 0.0}}")
set(run run --config enc.json --weights ${FIXTURES}/viz_run_w.safetensors)
expect_error("run: --out: cannot create a temporary file next to 'nodir/y.safetensors'" ${run}
  --inputs ${FIXTURES}/viz_run_in.safetensors --out nodir/y.safetensors)
file(WRITE ${WORK}/pic.pgm "P2\n1 1\n255\n7\n")
expect_error("run: --out 'pic.pgm' is the same file as the input 'pic.pgm'" ${run} --image pic.pgm --out pic.pgm
  --force)
expect_error("demo: --svg and --out name the same file 'dd/cross_attention.html'" demo --out dd
  --svg dd/cross_attention.html)
file(GLOB leftovers ${WORK}/*.tmp* ${WORK}/dd/*)
if(leftovers)
  message(SEND_ERROR "files left behind: ${leftovers}")
endif()
