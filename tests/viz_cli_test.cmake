# attn viz: outputs of a GPT checkpoint and of an `attn run` model (SVG, HTML, CSV, rollout,
# windowing), and its errors: one line, exit 1 for bad input, exit 2 for usage.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect rc regex)
  execute_process(COMMAND ${ATTN} ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE got OUTPUT_VARIABLE out
    ERROR_VARIABLE err TIMEOUT 120)
  set(all "${out}${err}")
  if(NOT got STREQUAL "${rc}" OR NOT all MATCHES "${regex}")
    message(SEND_ERROR "attn ${ARGN}: exit ${got} (want ${rc}), output:\n${all}\n(want /${regex}/)")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${got}")
  endif()
endfunction()

# exactly one line on stderr, "attn: viz: ..." matching regex, exit rc, nothing written on stdout
function(expect_error rc regex)
  execute_process(COMMAND ${ATTN} ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE got OUTPUT_VARIABLE out
    ERROR_VARIABLE err TIMEOUT 120)
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines n)
  if(NOT got STREQUAL "${rc}" OR NOT n EQUAL 1 OR NOT err MATCHES "^attn: viz: " OR NOT err MATCHES "${regex}"
     OR NOT out STREQUAL "")
    message(SEND_ERROR "attn ${ARGN}: exit ${got} (want ${rc}), stdout:\n${out}\nstderr (want one line /${regex}/):\n${err}")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${got}: ${err}")
  endif()
endfunction()

function(expect_file path regex)
  if(NOT EXISTS ${path})
    message(SEND_ERROR "${path} was not written")
    return()
  endif()
  file(READ ${path} text)
  if(NOT text MATCHES "${regex}")
    message(SEND_ERROR "${path} does not match /${regex}/")
  endif()
endfunction()

expect(0 "usage: attn viz.*--rollout.*--html FILE" viz --help)
expect(0 "viz +attention weights" --help)

# a tiny GPT checkpoint (2 layers, 2 heads) and one whose attention has no weights (linear)
string(REPEAT "the quick brown fox jumps over the lazy dog. " 20 fox)
file(WRITE ${WORK}/fox.txt "${fox}")
set(tiny --layers 2 --heads 2 --d-model 16 --context 32 --batch 4 --threads 2 --steps 5)
expect(0 "checkpoint: gpt.safetensors" train gpt --data fox.txt ${tiny} --checkpoint gpt.safetensors)
expect(0 "checkpoint: lin.safetensors" train gpt --data fox.txt ${tiny} --attention linear --checkpoint lin.safetensors)

expect(0 "wrote g-L0-mean.svg.*wrote g-L1-h1.svg.*wrote g-rollout.svg.*wrote g.html.*wrote g.csv"
  viz --checkpoint gpt.safetensors --text "the <fox> & dog" --rollout --svg g.svg --html g.html --csv g.csv --threads 2)
expect_file(${WORK}/g-L1-h1.svg "<svg .*layers.1.self_attn, head 1.*&lt;.*transform=\"rotate\\(-90")
expect_file(${WORK}/g-rollout.svg "rollout")
expect_file(${WORK}/g.csv "^map,module,layer,head,query,key,query_label,key_label,weight\n0,\"layers.0.self_attn\",0,mean,0,0,\"t\",\"t\",1\n")
expect_file(${WORK}/g.csv "\n[0-9]+,\"rollout\",-1,rollout,14,14,\"g\",\"g\",[0-9.e-]+\n$")
expect_file(${WORK}/g.html "^<!DOCTYPE html>.*<select id=\"layer\">.*\"\\\\u003c\",\"f\",\"o\",\"x\",\"\\\\u003e\"")
file(READ ${WORK}/g.html page)
if(page MATCHES "(src|href)=\"https?:" OR page MATCHES "<link ")
  message(SEND_ERROR "g.html loads something from elsewhere")
endif()
# chosen layer and heads only; token ids; a window of a long input, and the page says so
expect(0 "^wrote one.svg\n$" viz --checkpoint gpt.safetensors --tokens 116,104,101 --layer 1 --head 0 --svg one.svg)
expect_file(${WORK}/one.svg "layers.1.self_attn, head 0")
expect(0 "wrote w.html.*note: Long sequence: showing queries 10..17 of 30 and keys 10..17 of 30"
  viz --checkpoint gpt.safetensors --text "0123456789abcdefghijklmnopqrst" --max-tokens 8 --start 10 --head mean --html w.html --csv w.csv)
expect_file(${WORK}/w.html "class=\"notice\" id=\"notice\">Long sequence")
expect_file(${WORK}/w.csv "\n1,\"layers.1.self_attn\",1,mean,17,17,\"h\",\"h\",")

# an `attn run` model on a safetensors of inputs (3-layer encoder, batch 2, padding in element 1)
file(WRITE ${WORK}/enc.json "{\"module\": \"transformer_encoder\", \"num_layers\": 3, \"norm\": false, \"encoder_layer\": {\"d_model\": 16, \"nhead\": 4, \"dim_feedforward\": 32, \"dropout\": 0.0}}")
set(run --config enc.json --weights ${FIXTURES}/viz_run_w.safetensors --inputs ${FIXTURES}/viz_run_in.safetensors)
expect(0 "wrote e-L2-h3.svg.*wrote e-rollout.svg.*wrote e.csv" viz ${run} --batch-index 1 --layer 0,2 --head 3 --rollout --svg e.svg --csv e.csv)
expect_file(${WORK}/e.csv "\"layers.2.self_attn\",2,3,8,8,\"8\",\"8\",")

# bad input: exit 1, one line
expect_error(1 "--layer 2 is out of range: the model has 2 attention layers" viz --checkpoint gpt.safetensors --text abc --layer 2 --svg x.svg)
expect_error(1 "--head 2 is out of range: layers.0.self_attn has 2 heads" viz --checkpoint gpt.safetensors --text abc --head 2 --svg x.svg)
expect_error(1 "token 300 at position 1 is outside the vocabulary \\[0, 256\\)" viz --checkpoint gpt.safetensors --tokens 1,300 --svg x.svg)
expect_error(1 "--text has 33 bytes, more than the model's context of 32" viz --checkpoint gpt.safetensors --text 012345678901234567890123456789012 --svg x.svg)
expect_error(1 "missing.safetensors" viz --checkpoint missing.safetensors --text abc --svg x.svg)
expect_error(1 "fox.txt" viz --checkpoint fox.txt --text abc --svg x.svg)
expect_error(1 "linear" viz --checkpoint lin.safetensors --text abc --svg x.svg)
expect_error(1 "no attention module matches 'encoder.\\*'" viz --checkpoint gpt.safetensors --text abc --attention "encoder.*" --svg x.svg)
expect_error(1 "--batch-index 2 is out of range: the input's batch is 2" viz ${run} --batch-index 2 --csv x.csv)
expect_error(1 "nodir/x.svg" viz --checkpoint gpt.safetensors --text abc --layer 0 --head 0 --svg nodir/x.svg)
expect_error(1 "missing.json" viz --config missing.json --weights ${FIXTURES}/viz_run_w.safetensors --inputs ${FIXTURES}/viz_run_in.safetensors --csv x.csv)
# usage: exit 2, one line
expect_error(2 "missing the model" viz --text abc --svg x.svg)
expect_error(2 "needs one of --text and --tokens" viz --checkpoint gpt.safetensors --svg x.svg)
expect_error(2 "nothing to write" viz --checkpoint gpt.safetensors --text abc)
expect_error(2 "--head: 'x' is not a head index" viz --checkpoint gpt.safetensors --text abc --head x --svg x.svg)
expect_error(2 "--inputs is for --config models" viz --checkpoint gpt.safetensors --inputs a.safetensors --svg x.svg)
expect_error(2 "--config needs --weights" viz --config enc.json --inputs a.safetensors --svg x.svg)
expect_error(2 "--layer" viz --checkpoint gpt.safetensors --text abc --layer -1 --svg x.svg)

# safe output: never an input, never a device, never (without --force) a file of another kind
file(SHA256 ${WORK}/gpt.safetensors gpt_sum)
expect_error(1 "--html 'gpt.safetensors' is the same file as the input 'gpt.safetensors'" viz
  --checkpoint gpt.safetensors --text abc --html gpt.safetensors --force)
execute_process(COMMAND mkfifo ${WORK}/out.fifo)
expect_error(1 "is a FIFO; only a regular file is replaced" viz --checkpoint gpt.safetensors --text abc
  --csv out.fifo)
file(WRITE ${WORK}/notes.csv "my notes\n")
expect_error(1 "'notes.csv' exists and is not a CSV file: refusing to replace it" viz --checkpoint gpt.safetensors
  --text abc --csv notes.csv)
file(READ ${WORK}/notes.csv notes)
file(SHA256 ${WORK}/gpt.safetensors gpt_sum2)
if(NOT notes STREQUAL "my notes\n" OR NOT gpt_sum STREQUAL gpt_sum2)
  message(SEND_ERROR "a refused output was changed")
endif()
expect(0 "wrote notes.csv" viz --checkpoint gpt.safetensors --text abc --csv notes.csv --force)
expect(0 "wrote g.html" viz --checkpoint gpt.safetensors --text abc --html g.html)
file(GLOB leftovers ${WORK}/*.tmp*)
if(leftovers)
  message(SEND_ERROR "temporary files left behind: ${leftovers}")
endif()
