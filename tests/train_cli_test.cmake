# `attn train gpt`, `attn sample` and `attn bench train` on tiny settings: help and exit codes,
# one-line errors, bitwise resume (N steps straight == k steps + --resume), Ctrl-C (SIGINT) writes a
# resumable checkpoint and exits 130, greedy sampling is deterministic and continues a learned
# pattern.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# run(VAR args...): run attn, VAR_rc = exit code, VAR = stdout + stderr, VAR_out = stdout.
macro(run var)
  execute_process(COMMAND ${ATTN} ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE ${var}_rc
    OUTPUT_VARIABLE ${var}_out ERROR_VARIABLE ${var}_err TIMEOUT 120)
  set(${var} "${${var}_out}${${var}_err}")
endmacro()

function(expect rc regex)
  run(r ${ARGN})
  if(NOT r_rc STREQUAL "${rc}" OR NOT r MATCHES "${regex}")
    message(SEND_ERROR "attn ${ARGN}: exit ${r_rc} (want ${rc}), output:\n${r}\n(want /${regex}/)")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${r_rc}")
  endif()
endfunction()

# exactly one line on stderr, starting with "attn: ", matching regex
function(expect_one_line_error rc regex)
  run(r ${ARGN})
  string(REGEX MATCHALL "\n" lines "${r_err}")
  list(LENGTH lines n)
  if(NOT r_rc STREQUAL "${rc}" OR NOT n EQUAL 1 OR NOT r_err MATCHES "^attn: " OR NOT r_err MATCHES "${regex}")
    message(SEND_ERROR "attn ${ARGN}: exit ${r_rc} (want ${rc}), stderr (want one 'attn: ' line /${regex}/):\n${r_err}")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${r_rc}: ${r_err}")
  endif()
endfunction()

# a final "final loss: X" line, X as printed (%.9g: the float's exact value)
function(final_loss out var)
  if(out MATCHES "final loss: ([^\n]+)")
    set(${var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  else()
    set(${var} "none" PARENT_SCOPE)
  endif()
endfunction()
# the same for "final val loss: X"
function(final_val out var)
  if(out MATCHES "final val loss: ([^\n]+)")
    set(${var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  else()
    set(${var} "none" PARENT_SCOPE)
  endif()
endfunction()

string(REPEAT "abc" 300 abc)
file(WRITE ${WORK}/abc.txt "${abc}")
file(WRITE ${WORK}/short.txt "abc")
string(REPEAT "the quick brown fox jumps over the lazy dog. " 20 fox)
file(WRITE ${WORK}/fox.txt "${fox}")
set(tiny --layers 1 --heads 2 --d-model 16 --context 8 --batch 4 --threads 2)

# ---- help and usage errors ----
expect(0 "usage: attn train gpt" train --help)
expect(0 "usage: attn train gpt.*256 byte values.*--attention NAME" train gpt --help)
expect(0 "usage: attn sample CHECKPOINT.*--temperature" sample --help)
expect(0 "usage: attn bench train.*--layers" bench train --help)
expect_one_line_error(2 "which model" train)
expect_one_line_error(2 "unknown model 'bert'" train bert)
expect_one_line_error(2 "missing --data" train gpt)
expect_one_line_error(2 "unknown attention kind 'sdpa' \\(available: flash, window" train gpt --data abc.txt --attention sdpa)
expect_one_line_error(2 "--window does not apply to --attention flash" train gpt --data abc.txt --window 4)
expect_one_line_error(2 "--attention window needs --window" train gpt --data abc.txt --attention window)
expect_one_line_error(2 "--attention local_global needs --window" train gpt --data abc.txt --attention local_global)
expect_one_line_error(2 "--features does not apply to --attention linear" train gpt --data abc.txt --attention linear --features 8)
expect(0 "--attention NAME.*flash +exact softmax.*window +softmax over a sliding window" train gpt --help)
expect_one_line_error(2 "--layers wants an integer" train gpt --data abc.txt --layers 0)
expect_one_line_error(2 "--lr wants a number" train gpt --data abc.txt --lr fast)
expect_one_line_error(2 "not a multiple of --heads" train gpt --data abc.txt --d-model 30 --heads 4)
expect_one_line_error(2 "unknown option '--bogus'" train gpt --data abc.txt --bogus)
expect_one_line_error(2 "missing CHECKPOINT" sample)
expect_one_line_error(2 "--tokens wants" sample x.safetensors --tokens -1)
expect_one_line_error(2 "--temperature wants" sample x.safetensors --temperature hot)
expect_one_line_error(2 "unknown option" sample x.safetensors --bogus)
expect_one_line_error(2 "--layers wants" bench train --layers 0)
expect_one_line_error(2 "not a multiple of --heads" bench train --d-model 30 --heads 4)
expect(0 "\"op\": \"train\", \"impl\": \"attn\", \"shape\": {\"layers\": 1, \"d_model\": 32.*\"threads\": 1, \"ms\": [0-9.]+, \"tokens_per_s\": [0-9.]+, \"gflops\""
  bench train --layers 1 --context 16 --d-model 32 --heads 2 --steps 1 --threads 1 --json)

# ---- runtime failures ----
expect_one_line_error(1 "cannot read 'missing.txt'" train gpt --data missing.txt)
expect_one_line_error(1 "has 3 bytes" train gpt --data short.txt ${tiny})
expect_one_line_error(1 "cannot read '.*': Is a directory" train gpt --data ${WORK})
expect_one_line_error(1 "resume" train gpt --data abc.txt ${tiny} --checkpoint none.safetensors --resume)
expect_one_line_error(1 "sample: " sample none.safetensors)
expect_one_line_error(1 "not a checkpoint of `attn train gpt`" sample ${FIXTURES}/sdpa.safetensors)

# ---- bitwise resume: 30 steps straight == 12 steps, then --resume to 30 (other thread count; the
# shape, seed, steps, batch, lr and warmup come from the checkpoint) ----
set(common --data fox.txt ${tiny} --steps 30 --lr 1e-2 --every 5 --log-every 10)
run(a train gpt ${common} --checkpoint straight.safetensors)
run(b train gpt ${common} --checkpoint split.safetensors --stop-at 12)
run(c train gpt --data fox.txt --checkpoint split.safetensors --resume --threads 1)
final_loss("${a}" la)
final_loss("${c}" lc)
final_val("${a}" va)
final_val("${c}" vc)
if(NOT a_rc EQUAL 0 OR NOT b_rc EQUAL 0 OR NOT c_rc EQUAL 0 OR la STREQUAL "none" OR NOT la STREQUAL lc
   OR va STREQUAL "none" OR NOT va STREQUAL vc
   OR NOT a MATCHES "step +1/30  loss [0-9.]+  lr .* tok/s" OR NOT c MATCHES "resuming from split.safetensors at step 12")
  message(SEND_ERROR "resume is not bitwise: straight (${a_rc}):\n${a}\nsplit (${b_rc}, ${c_rc}):\n${b}${c}")
else()
  message(STATUS "ok: 30 steps straight and 12 + resumed 18 both end at loss ${la}, val loss ${va}")
endif()
# the held-out split is part of the run: a resume with another --val-fraction is refused
expect_one_line_error(1 "--val-fraction 0.2 differs from the checkpoint's 0.1" train gpt --data fox.txt
  --checkpoint split.safetensors --resume --val-fraction 0.2)

# ---- validation loss: the last --val-fraction of the data is held out (never trained on) ----
# Evaluating changes nothing: every step or only at the end, the checkpoints are byte-identical.
set(vcommon --data fox.txt ${tiny} --steps 12 --lr 1e-2 --every 0 --log-every 4)
run(e1 train gpt ${vcommon} --checkpoint eval1.safetensors --eval-interval 1)
run(e0 train gpt ${vcommon} --checkpoint eval0.safetensors --eval-interval 0)
file(SHA256 ${WORK}/eval1.safetensors e1_sum)
file(SHA256 ${WORK}/eval0.safetensors e0_sum)
string(REGEX MATCHALL "step +[0-9]+/12  val loss [0-9]+\\.[0-9]+\n" e1_vals "${e1_out}")
list(LENGTH e1_vals e1_n)
string(REGEX MATCHALL "val loss" e0_vals "${e0_out}")
list(LENGTH e0_vals e0_n)
final_val("${e1}" v1)
final_val("${e0}" v0)
if(NOT e1_rc EQUAL 0 OR NOT e0_rc EQUAL 0 OR NOT e1_sum STREQUAL e0_sum OR NOT e1_n EQUAL 12 OR NOT e0_n EQUAL 1
   OR NOT v1 MATCHES "^[0-9]+\\.[0-9]+$" OR NOT v1 STREQUAL v0 OR NOT e1 MATCHES "\\(90 held out for validation\\)")
  message(SEND_ERROR "validation changed the run, or its lines are missing (${e1_n} of 12, ${e0_n} of 1):\n${e1}\n${e0}")
else()
  message(STATUS "ok: 12 val loss lines (final ${v1}), the same weights as without them")
endif()
# the validation windows come from the tail: on "abcabc..." ending in other text the model learns
# the head and does badly on the tail; on "abcabc..." alone the two losses are alike
string(REPEAT "the lazy dog sleeps. " 5 tail)
file(WRITE ${WORK}/headtail.txt "${abc}${tail}")
set(vlearn --layers 1 --heads 2 --d-model 16 --context 8 --batch 4 --steps 40 --lr 2e-2 --threads 2 --every 0
  --eval-interval 20 --log-every 20)
run(ht train gpt --data headtail.txt ${vlearn} --checkpoint ht.safetensors)
run(hh train gpt --data abc.txt ${vlearn} --checkpoint hh.safetensors)
final_loss("${ht}" ht_train)
final_val("${ht}" ht_val)
final_loss("${hh}" hh_train)
final_val("${hh}" hh_val)
set(ht_ok 0)
if(ht_rc EQUAL 0 AND hh_rc EQUAL 0 AND ht_val MATCHES "^[0-9.]+$" AND hh_val MATCHES "^[0-9.]+$")
  # integer parts: a coarse check (CMake's math is integer only)
  string(REGEX REPLACE "\\..*" "" ht_val_i "${ht_val}")
  string(REGEX REPLACE "\\..*" "" ht_train_i "${ht_train}")
  string(REGEX REPLACE "\\..*" "" hh_val_i "${hh_val}")
  string(REGEX REPLACE "\\..*" "" hh_train_i "${hh_train}")
  math(EXPR ht_gap "${ht_val_i} - ${ht_train_i}")
  math(EXPR hh_gap "${hh_val_i} - ${hh_train_i}")
  if(ht_gap GREATER_EQUAL 3 AND hh_gap LESS_EQUAL 1)
    set(ht_ok 1)
  endif()
endif()
if(NOT ht_ok)
  message(SEND_ERROR "val loss not from the held-out tail: head+tail train ${ht_train} val ${ht_val}; "
    "abc train ${hh_train} val ${hh_val}:\n${ht}\n${hh}")
else()
  message(STATUS "ok: val loss ${ht_val} on an unseen tail (train ${ht_train}); ${hh_val} on a like one (train ${hh_train})")
endif()
run(nv train gpt --data fox.txt ${tiny} --steps 2 --checkpoint nov.safetensors --val-fraction 0)
if(NOT nv_rc EQUAL 0 OR NOT nv MATCHES "final loss" OR nv MATCHES "val loss|held out")
  message(SEND_ERROR "--val-fraction 0 (exit ${nv_rc}) should train without validating:\n${nv}")
endif()
# too little held out for one window of --context + 1 bytes
string(REPEAT "x" 100 hundred)
file(WRITE ${WORK}/hundred.txt "${hundred}")
expect_one_line_error(1 "--val-fraction 0.1 of the 100 bytes of 'hundred.txt' holds out 10; --context 16 needs at least 17"
  train gpt --data hundred.txt --context 16 --checkpoint hundred.safetensors)
expect_one_line_error(2 "--val-fraction wants a number in \\[0, 0.9\\]" train gpt --data fox.txt --val-fraction 0.95)
expect_one_line_error(1 "--layers 2 differs from the checkpoint's 1" train gpt ${common} --checkpoint split.safetensors
  --resume --layers 2)

# ---- --precision bf16: bitwise resume within bf16 (the precision comes from the checkpoint), the
# checkpoint's tensors F32 and its metadata naming the precision; another precision on resume is
# allowed with a note; the loss curves of fp32 and bf16 on the same data and seed stay close ----
expect_one_line_error(2 "--precision 'fp16' is neither fp32 nor bf16" train gpt --data fox.txt --precision fp16)
expect_one_line_error(2 "--precision 'half' is neither fp32 nor bf16" bench train --precision half)
expect(0 "\"precision\": \"bf16\", \"threads\": 1, \"ms\": [0-9.]+, \"tokens_per_s\""
  bench train --layers 1 --context 16 --d-model 32 --heads 2 --steps 1 --threads 1 --json --precision bf16)
if(OPENMP)
  set(threads2 2)
else() # one thread without OpenMP
  set(threads2 1)
endif()
run(a16 train gpt ${common} --precision bf16 --checkpoint straight16.safetensors)
set(common16 --data fox.txt --layers 1 --heads 2 --d-model 16 --context 8 --batch 4 --steps 30 --lr 1e-2 --every 5
  --log-every 10 --precision bf16)
run(b16 train gpt ${common16} --threads 1 --checkpoint split16.safetensors --stop-at 12)
run(c16 train gpt --data fox.txt --checkpoint split16.safetensors --resume --threads 1)
final_loss("${a16}" la16)
final_loss("${c16}" lc16)
file(READ ${WORK}/split16.safetensors head16 OFFSET 8 LIMIT 20000) # the JSON header
if(NOT a16_rc EQUAL 0 OR NOT c16_rc EQUAL 0 OR la16 STREQUAL "none" OR NOT la16 STREQUAL lc16
   OR NOT a16 MATCHES "lr 0.01, bf16, ${threads2} threads" OR NOT c16 MATCHES "resuming from split16.safetensors at step 12.*lr 0.01, bf16, 1 threads"
   OR NOT head16 MATCHES "\"train.precision\":\"bf16\"" OR head16 MATCHES "\"dtype\":\"(BF16|F16)\"")
  message(SEND_ERROR "bf16 resume: straight (${a16_rc}):\n${a16}\nsplit (${b16_rc}, ${c16_rc}):\n${b16}${c16}")
else()
  message(STATUS "ok: bf16: 30 steps straight and 12 + resumed 18 both end at loss ${la16} (fp32: ${la})")
endif()
expect(0 "note: --precision fp32, the checkpoint was trained in bf16.*resuming from split16.safetensors at step 30.*final loss"
  train gpt --data fox.txt --checkpoint split16.safetensors --resume --precision fp32 --steps 32 --threads 1)
run(lc32 train gpt --data fox.txt --layers 1 --heads 2 --d-model 32 --context 16 --batch 8 --steps 200 --lr 1e-2
  --threads 1 --checkpoint lc32.safetensors --log-every 25)
run(lc16 train gpt --data fox.txt --layers 1 --heads 2 --d-model 32 --context 16 --batch 8 --steps 200 --lr 1e-2
  --threads 1 --checkpoint lc16.safetensors --log-every 25 --precision bf16)
final_loss("${lc32}" f32)
final_loss("${lc16}" f16)
if(NOT lc32_rc EQUAL 0 OR NOT lc16_rc EQUAL 0 OR f32 STREQUAL "none" OR f16 STREQUAL "none")
  message(SEND_ERROR "loss curves: fp32 (${lc32_rc}):\n${lc32}\nbf16 (${lc16_rc}):\n${lc16}")
else()
  # |f16 - f32| <= 2% of f32, in units of 1e-6
  foreach(v f32 f16)
    string(REGEX MATCH "^([0-9]+)\\.([0-9]*)" _ "${${v}}")
    string(SUBSTRING "${CMAKE_MATCH_2}000000" 0 6 frac)
    math(EXPR ${v}_u "${CMAKE_MATCH_1} * 1000000 + 1${frac} - 1000000")
  endforeach()
  math(EXPR diff "${f16_u} - ${f32_u}")
  if(diff LESS 0)
    math(EXPR diff "-${diff}")
  endif()
  math(EXPR tol "${f32_u} / 50")
  if(diff GREATER tol)
    message(SEND_ERROR "loss curves: final fp32 ${f32}, bf16 ${f16}: more than 2% apart\n${lc32}\n${lc16}")
  else()
    message(STATUS "ok: 200 steps, final loss fp32 ${f32}, bf16 ${f16}")
  endif()
endif()

# ---- safe output: the checkpoint is never an input, never replaces a non-checkpoint (without
# --force) or, without --resume, a trained model (without --force); a bad path fails before training ----
file(SHA256 ${WORK}/straight.safetensors straight_sum)
expect_one_line_error(1 "--checkpoint 'fox.txt' is the same file as the input 'fox.txt'" train gpt --data fox.txt
  ${tiny} --steps 2 --checkpoint fox.txt)
expect_one_line_error(1 "--checkpoint 'fox.txt' is the same file as the input" train gpt --data fox.txt
  ${tiny} --steps 2 --checkpoint fox.txt --force)
file(WRITE ${WORK}/notes.txt "my notes\n")
expect_one_line_error(1 "'notes.txt' exists and is not an attn checkpoint: refusing to replace it.*--force" train gpt
  --data fox.txt ${tiny} --steps 2 --checkpoint notes.txt)
file(READ ${WORK}/notes.txt notes)
expect_one_line_error(1 "--checkpoint 'straight.safetensors' already holds a checkpoint: continue it with --resume, or replace it with --force"
  train gpt --data fox.txt ${tiny} --steps 2 --checkpoint straight.safetensors)
file(SHA256 ${WORK}/straight.safetensors straight_sum2)
if(NOT notes STREQUAL "my notes\n" OR NOT straight_sum STREQUAL straight_sum2)
  message(SEND_ERROR "a refused checkpoint path was changed")
endif()
expect(0 "final loss" train gpt --data fox.txt ${tiny} --steps 2 --checkpoint notes.txt --force)
execute_process(COMMAND mkfifo ${WORK}/ck.fifo)
expect_one_line_error(1 "is a FIFO; only a regular file is replaced" train gpt --data fox.txt ${tiny}
  --steps 2 --checkpoint ck.fifo)
run(nd train gpt --data fox.txt ${tiny} --steps 2 --checkpoint nodir/x.safetensors)
if(NOT nd_rc EQUAL 1 OR nd MATCHES "step " OR NOT nd MATCHES "cannot create a temporary file next to 'nodir/x.safetensors'")
  message(SEND_ERROR "a missing checkpoint folder: exit ${nd_rc}, want 1 before any step:\n${nd}")
else()
  message(STATUS "ok: a missing checkpoint folder fails before training: ${nd}")
endif()
file(GLOB leftovers ${WORK}/*.tmp*)
if(leftovers)
  message(SEND_ERROR "temporary files left behind: ${leftovers}")
endif()
# ---- safe input: devices and FIFOs fail at once ----
expect_one_line_error(1 "cannot read '/dev/zero': it is a character device, not a regular file" train gpt
  --data /dev/zero ${tiny})
find_program(MKFIFO mkfifo)
if(MKFIFO)
  execute_process(COMMAND ${MKFIFO} ${WORK}/fifo)
  expect_one_line_error(1 "cannot read 'fifo': it is a FIFO, not a regular file" train gpt --data fifo ${tiny})
  expect_one_line_error(1 "--checkpoint: output .fifo. is a FIFO; only a regular file is replaced" train gpt --data fox.txt ${tiny} --checkpoint fifo --resume)
  expect_one_line_error(1 "fifo.*not a regular file" sample fifo)
endif()

# ---- a checkpoint whose metadata claims more layers than its tensors hold is refused before a
# model of that size is built (the claim is checked against the tensors, not trusted) ----
find_program(SED sed)
if(SED)
  execute_process(COMMAND ${SED} "s/\"gpt.layers\":\"1\"/\"gpt.layers\":\"9\"/" straight.safetensors
    WORKING_DIRECTORY ${WORK} OUTPUT_FILE ${WORK}/layers9.safetensors)
  expect_one_line_error(1 "does not match the tensors: 'layers.1.linear1.weight' is missing" sample layers9.safetensors)
  expect_one_line_error(1 "does not match the tensors: 'layers.1.linear1.weight' is missing" train gpt --data fox.txt
    --checkpoint layers9.safetensors --resume)
endif()

# ---- --resume on other data, or with --steps below the checkpoint's step, says so and stops ----
run(h train gpt --data fox.txt ${tiny} --steps 6 --stop-at 4 --checkpoint h.safetensors)
expect_one_line_error(1 "--resume: --data 'abc.txt' is not the data h.safetensors was trained on" train gpt
  --data abc.txt --checkpoint h.safetensors --resume)
expect_one_line_error(1 "--resume: --steps 3 is below the checkpoint's step 4" train gpt --data fox.txt
  --checkpoint h.safetensors --resume --steps 3)
expect(0 "resuming from h.safetensors at step 4.*final loss" train gpt --data fox.txt --checkpoint h.safetensors --resume)

# ---- Ctrl-C: SIGINT mid-run writes the checkpoint and exits 130; --resume continues from it ----
# The signal is sent once training has started (its banner is out and a second has passed), so a
# slow start (a sanitizer build on a loaded machine) cannot take it before the handler is set.
find_program(SH sh)
if(SH)
  execute_process(COMMAND ${SH} -c "\"$0\" train gpt --data fox.txt $1 --steps 100000000 --checkpoint int.safetensors \
--log-every 1000000 > int.out & pid=$!; n=0; until grep -q '^gpt: ' int.out 2>/dev/null || [ $n -ge 600 ]; do \
sleep 0.1; n=$((n+1)); done; sleep 1; kill -INT $pid; wait $pid; rc=$?; cat int.out; exit $rc"
    ${ATTN} "--layers 1 --heads 2 --d-model 16 --context 8 --batch 4 --threads 2"
    WORKING_DIRECTORY ${WORK} RESULT_VARIABLE irc OUTPUT_VARIABLE iout ERROR_VARIABLE ierr TIMEOUT 90)
  if(NOT irc EQUAL 130 OR NOT iout MATCHES "interrupted after step [0-9]+ of 100000000: checkpoint written to int.safetensors"
     OR NOT EXISTS ${WORK}/int.safetensors)
    message(SEND_ERROR "SIGINT: exit ${irc} (want 130), output:\n${iout}${ierr}")
  else()
    message(STATUS "ok: SIGINT -> 130, checkpoint written")
  endif()
  string(REGEX MATCH "interrupted after step ([0-9]+)" _ "${iout}")
  math(EXPR resume_to "${CMAKE_MATCH_1} + 2")
  expect(0 "resuming from int.safetensors at step ${CMAKE_MATCH_1}.*final loss: " train gpt --data fox.txt ${tiny}
    --steps 100000000 --checkpoint int.safetensors --resume --stop-at ${resume_to})
else()
  message(STATUS "skipped: no sh to send SIGINT")
endif()

# ---- sampling: a model trained 200 steps on "abcabc..." continues the pattern, greedily ----
run(t train gpt --data abc.txt --layers 1 --heads 2 --d-model 32 --context 16 --batch 8 --steps 200 --lr 1e-2
  --threads 2 --checkpoint abc.safetensors --log-every 50)
if(NOT t_rc EQUAL 0)
  message(SEND_ERROR "training on abc.txt failed (${t_rc}):\n${t}")
endif()
run(s1 sample abc.safetensors --prompt "ab" --tokens 40 --temperature 0)
run(s2 sample abc.safetensors --prompt "ab" --tokens 40 --temperature 0 --threads 1)
string(REPEAT "abc" 14 want) # the prompt "ab" and 40 bytes
if(NOT s1_rc EQUAL 0 OR NOT s1_out STREQUAL s2_out OR NOT s1_out STREQUAL "${want}\n")
  message(SEND_ERROR "greedy sampling: exit ${s1_rc}, outputs:\n${s1}\n${s2}")
else()
  message(STATUS "ok: greedy sample: ${s1_out}")
endif()
# attn sample streams: the bytes produced so far are out before it is stopped
find_program(TIMEOUT timeout)
if(TIMEOUT)
  execute_process(COMMAND ${TIMEOUT} 3 ${ATTN} sample abc.safetensors --prompt "ab" --tokens 1000000000 --temperature 0
    WORKING_DIRECTORY ${WORK} OUTPUT_FILE ${WORK}/stream.out RESULT_VARIABLE src)
  file(READ ${WORK}/stream.out streamed)
  if(NOT streamed MATCHES "^abcabc")
    message(SEND_ERROR "attn sample did not stream (exit ${src}): '${streamed}'")
  else()
    string(LENGTH "${streamed}" sl)
    message(STATUS "ok: attn sample streamed ${sl} bytes before it was stopped")
  endif()
endif()
# the same with sliding-window attention (3 keys back suffice for "abc"): the kind is kept in the
# checkpoint, sampling decodes with it, and resuming with another kind is refused
run(tw train gpt --data abc.txt --layers 1 --heads 2 --d-model 32 --context 16 --batch 8 --steps 200 --lr 1e-2
  --threads 2 --checkpoint abcw.safetensors --log-every 50 --attention window --window 3)
run(sw sample abcw.safetensors --prompt "ab" --tokens 40 --temperature 0)
if(NOT tw_rc EQUAL 0 OR NOT tw MATCHES "window attention \\(window 3\\)" OR NOT sw_out STREQUAL "${want}\n")
  message(SEND_ERROR "window attention: train ${tw_rc}, sample ${sw_rc}:\n${tw}\n${sw}")
else()
  message(STATUS "ok: window-attention model samples ${sw_out}")
endif()
# linear attention: trains, and sampling decodes with its recurrent state
run(tl train gpt --data abc.txt --layers 1 --heads 2 --d-model 16 --context 8 --batch 4 --steps 60 --lr 2e-2
  --threads 2 --checkpoint abcl.safetensors --log-every 30 --attention linear)
run(sl sample abcl.safetensors --prompt "ab" --tokens 40 --temperature 0)
if(NOT tl_rc EQUAL 0 OR NOT sl_out STREQUAL "${want}\n")
  message(SEND_ERROR "linear attention: train ${tl_rc}, sample ${sl_rc}:\n${tl}\n${sl}")
else()
  message(STATUS "ok: linear-attention model samples ${sl_out}")
endif()
# performer: its options travel in the checkpoint (a resume with other features is refused) and
# sampling redraws the same projection
run(tp train gpt --data abc.txt --layers 1 --heads 2 --d-model 16 --context 8 --batch 4 --steps 4
  --threads 2 --checkpoint abcp.safetensors --log-every 2 --attention performer --features 32 --feature-seed 5)
run(sp sample abcp.safetensors --prompt "ab" --tokens 8 --temperature 0)
if(NOT tp_rc EQUAL 0 OR NOT tp MATCHES "performer attention \\(num_features 32, seed 5\\)" OR NOT sp_rc EQUAL 0
   OR NOT sp_out MATCHES "^ab")
  message(SEND_ERROR "performer attention: train ${tp_rc}, sample ${sp_rc}:\n${tp}\n${sp}")
else()
  message(STATUS "ok: performer-attention model trains and samples")
endif()
expect_one_line_error(1 "--attention performer differs from the checkpoint's performer" train gpt --data abc.txt
  --checkpoint abcp.safetensors --resume --attention performer --features 64)
expect_one_line_error(1 "--attention flash differs from the checkpoint's window" train gpt --data abc.txt
  --checkpoint abcw.safetensors --resume --attention flash)
# sampling with temperature and top-k: the same seed gives the same text; prompts longer than the
# context and generations past it work
string(REPEAT "bca" 10 longprompt)
run(s3 sample abc.safetensors --prompt "${longprompt}" --tokens 50 --temperature 1 --top-k 2 --seed 7)
run(s4 sample abc.safetensors --prompt "${longprompt}" --tokens 50 --temperature 1 --top-k 2 --seed 7)
if(NOT s3_rc EQUAL 0 OR NOT s3_out STREQUAL s4_out OR NOT s3_out MATCHES "^${longprompt}[abc]+\n$")
  message(SEND_ERROR "seeded sampling: exit ${s3_rc}, outputs:\n${s3}\n${s4}")
else()
  message(STATUS "ok: seeded top-k sample repeats")
endif()

# ---- issue #28: one run per checkpoint (its lock), stale temporaries, SIGTERM inside a long step ----
if(SH)
  # a writer SIGKILLed before its rename left a temporary: the next save removes it (its pid is
  # dead), and keeps a file whose name proves nothing
  execute_process(COMMAND ${SH} -c "echo $$" OUTPUT_VARIABLE deadpid OUTPUT_STRIP_TRAILING_WHITESPACE)
  file(WRITE ${WORK}/lk.safetensors.tmp-${deadpid}-0123456789abcdef "junk")
  file(WRITE ${WORK}/lk.safetensors.tmp-other "junk")
  run(lk train gpt --data fox.txt ${tiny} --steps 2 --checkpoint lk.safetensors)
  if(NOT lk_rc EQUAL 0 OR EXISTS ${WORK}/lk.safetensors.tmp-${deadpid}-0123456789abcdef
     OR NOT EXISTS ${WORK}/lk.safetensors.tmp-other OR EXISTS ${WORK}/lk.safetensors.lock)
    message(SEND_ERROR "stale temporary: exit ${lk_rc}, the dead writer's file or the lock file left:\n${lk}")
  else()
    message(STATUS "ok: a dead writer's temporary removed, the lock file removed at the end")
  endif()
  # two --resume on one checkpoint: the second is refused while the first runs; the first then
  # stops on SIGTERM with its checkpoint, and the lock is free again
  execute_process(COMMAND ${SH} -c "\"$0\" train gpt --data fox.txt $1 --steps 100000000 --checkpoint lk.safetensors \
--resume --log-every 1000000 > lk1.out & pid=$!; n=0; until grep -q '^gpt: ' lk1.out 2>/dev/null || [ $n -ge 600 ]; do \
sleep 0.1; n=$((n+1)); done; \"$0\" train gpt --data fox.txt --checkpoint lk.safetensors --resume --steps 100000000 \
> lk2.out 2>&1; echo \"second: $?\"; cat lk2.out; kill -TERM $pid; wait $pid; echo \"first: $?\"; cat lk1.out"
    ${ATTN} "--layers 1 --heads 2 --d-model 16 --context 8 --batch 4 --threads 2"
    WORKING_DIRECTORY ${WORK} OUTPUT_VARIABLE lkout ERROR_VARIABLE lkerr TIMEOUT 90)
  if(NOT lkout MATCHES "second: 1\nattn: train gpt: 'lk.safetensors' is in use: another process \\(pid [0-9]+\\) holds its lock 'lk.safetensors.lock'"
     OR NOT lkout MATCHES "first: 130\n" OR NOT lkout MATCHES "interrupted after step")
    message(SEND_ERROR "two runs on one checkpoint:\n${lkout}${lkerr}")
  else()
    message(STATUS "ok: a second run on a checkpoint in use refused")
  endif()
  string(REGEX MATCH "interrupted after step ([0-9]+)" _ "${lkout}")
  math(EXPR lk_to "${CMAKE_MATCH_1} + 1")
  expect(0 "resuming from lk.safetensors at step ${CMAKE_MATCH_1}" train gpt --data fox.txt --checkpoint lk.safetensors
    --resume --threads 2 --stop-at ${lk_to})
  # SIGTERM inside a step of 512 micro-batches: it stops between two of them, not after the step
  execute_process(COMMAND ${SH} -c "\"$0\" train gpt --data fox.txt --layers 2 --heads 2 --d-model 64 --context 256 \
--batch 512 --micro-batch 1 --val-fraction 0 --threads 1 --steps 10 --checkpoint term.safetensors > term.out & pid=$!; n=0; \
until grep -q '^gpt: ' term.out 2>/dev/null || [ $n -ge 600 ]; do sleep 0.1; n=$((n+1)); done; sleep 0.5; \
kill -TERM $pid; wait $pid; rc=$?; cat term.out; exit $rc"
    ${ATTN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE trc OUTPUT_VARIABLE tout ERROR_VARIABLE terr TIMEOUT 90)
  if(NOT trc EQUAL 130 OR NOT tout MATCHES "interrupted after step 0 of 10: checkpoint written to term.safetensors")
    message(SEND_ERROR "SIGTERM inside a step: exit ${trc} (want 130, after step 0), output:\n${tout}${terr}")
  else()
    message(STATUS "ok: SIGTERM inside a step -> 130 after step 0")
  endif()
endif()

# ---- issue #28: a run that cannot fit in memory is refused at the start, with the figures ----
# the weights (an estimate, before they are allocated), then the activations of a micro-batch
expect_one_line_error(1 "train gpt: the run needs [0-9.]+ GB \\([0-9.]+ GB for [0-9]+ parameters .*for --micro-batch 16\\), over this machine's [0-9.]+ GB of memory"
  train gpt --data fox.txt --d-model 65536 --layers 256 --checkpoint huge.safetensors)
expect_one_line_error(1 "train gpt: the run needs [0-9.]+ GB .*[0-9.]+ GB of activations and workspace for --micro-batch 1048576\\), over this machine's"
  train gpt --data fox.txt --context 64 --batch 1048576 --checkpoint wide.safetensors)
if(EXISTS ${WORK}/huge.safetensors OR EXISTS ${WORK}/wide.safetensors)
  message(SEND_ERROR "a refused run wrote a checkpoint")
endif()
