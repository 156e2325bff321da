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

# expect_usage_error(REGEX args...): exit 2, nothing on stdout, exactly one line on stderr that
# starts with "attn: " and matches REGEX.
function(expect_usage_error regex)
  execute_process(COMMAND ${ATTN} ${ARGN} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines n)
  if(NOT got STREQUAL "2" OR NOT n EQUAL 1 OR NOT err MATCHES "^attn: " OR NOT err MATCHES "${regex}"
     OR NOT out STREQUAL "")
    message(SEND_ERROR "attn ${ARGN}: exit ${got} (want 2), stdout:\n${out}\nstderr (want one 'attn: ' line /${regex}/):\n${err}")
  else()
    message(STATUS "ok: attn ${ARGN} -> ${got}: ${err}")
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
# the top-level help lists every benchmark and train model (from the command tables)
expect(0 "benchmarks: peak, gemm, attention, decode, train, allreduce, scaling.*train a model: gpt, vit" --help)
expect(0 "attn [0-9]+\\.[0-9]+" --version)
expect(2 "usage: attn")
expect(2 "unknown command 'frobnicate'" frobnicate)
foreach(cmd info inspect bench demo run)
  expect(0 "usage: attn ${cmd}" ${cmd} --help)
endforeach()
expect(0 "vision_transformer.*image_size, patch_size.*x \\[B, C, H, W\\]" run --help)
file(WRITE ${WORK}/vit.json "{\"module\": \"vision_transformer\", \"patch_size\": 4}")
expect(1 "vision_transformer: missing key 'image_size'" run --config=${WORK}/vit.json --weights=w --inputs=i --out=o)
foreach(sub peak gemm attention decode train scaling)
  expect(0 "usage: attn bench ${sub}" bench ${sub} --help)
endforeach()
expect(0 "kernels: +(ref|avx2|avx512)" info)
set(ENV{ATTN_ISA} ref)
expect(0 "kernels: +ref" info)
unset(ENV{ATTN_ISA})
# environment: a bad ATTN_ISA or ATTN_NUM_THREADS is reported (one line on stderr; the command runs)
set(ENV{ATTN_ISA} evil)
expect(0 "kernels: +(ref|avx2|avx512).*attn: warning: ATTN_ISA='evil' is not ref, avx2 or avx512: ignored" info)
unset(ENV{ATTN_ISA})
set(ENV{ATTN_NUM_THREADS} 99999999)
if(OPENMP)
  expect(0 "threads: +4096.*attn: warning: ATTN_NUM_THREADS='99999999' is above the bound of 4096 threads: using 4096" info)
else() # without OpenMP one thread, whatever ATTN_NUM_THREADS says
  expect(0 "threads: +1\n" info)
endif()
set(ENV{ATTN_NUM_THREADS} many)
expect(0 "attn: warning: ATTN_NUM_THREADS='many' is not a positive integer: ignored" info)
unset(ENV{ATTN_NUM_THREADS})
# the tuning: microarchitecture, cache sizes and their source, the blocking; ATTN_CACHE overrides
expect(0 "microarch:.*caches: +L1d [0-9]+ [KM]iB \\([^)]+\\), L2 .*sgemm \\((ref|avx2|avx512)\\): +MR [0-9]+ x NR [0-9]+; KC [0-9]+" info)
set(ENV{ATTN_CACHE} "l1=48K,l2=2M,l3=105M")
expect(0 "L1d 48 KiB \\(ATTN_CACHE\\), L2 2 MiB \\(ATTN_CACHE\\), L3 105 MiB \\(ATTN_CACHE\\)" info)
set(ENV{ATTN_CACHE} "l1=48Q")
expect(0 "caches: +L1d .*attn: warning: ATTN_CACHE='l1=48Q': a size must be 4K .. 16G.*: ignored" info)
unset(ENV{ATTN_CACHE})
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

# attn run on the reference sketch's SparseAttention, LocalGlobalAttention, LinearAttention and
# PerformerAttention (tests/parity/gen_seed_modules.py, cases 2, 4, 6 and 9 (causal)): MODEL.json
# from the fixture's config, the state_dict under the seed's names (attn.W_q.weight,
# local_attn.W_q.weight, query_projection.weight, W_q.weight and the buffer R, ...), input x; the
# output against PyTorch's (rel err <= 1e-5). Then a sparse_attention given local_global weights:
# the missing names are the seed's; a performer_attention whose num_features does not match R.
set(seed_fx ${FIXTURES}/seed_modules.safetensors)
foreach(pair "2;sparse_attention" "4;local_global_attention" "6;linear_attention" "9;performer_attention")
  list(GET pair 0 case)
  list(GET pair 1 module)
  set(dir ${WORK}/seed/${case})
  file(MAKE_DIRECTORY ${dir})
  execute_process(COMMAND ${SEED_HELPER} --split ${seed_fx} ${case} ${dir} RESULT_VARIABLE got
    ERROR_VARIABLE err)
  file(READ ${dir}/model.json seed_model)
  if(NOT got STREQUAL "0" OR NOT seed_model MATCHES "\"${module}\"")
    message(SEND_ERROR "splitting ${seed_fx} case ${case}: exit ${got}, ${err}, model ${seed_model}")
  endif()
  expect(0 "^$" run --config ${dir}/model.json --weights ${dir}/w.safetensors
    --inputs ${dir}/in.safetensors --out ${dir}/out.safetensors --threads 2)
  execute_process(COMMAND ${SEED_HELPER} --compare ${dir}/out.safetensors ${seed_fx} ${case}
    RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT got STREQUAL "0")
    message(SEND_ERROR "attn run ${module} against ${seed_fx} case ${case}: ${out}${err}")
  else()
    message(STATUS "ok: attn run ${module}: ${out}")
  endif()
endforeach()
file(WRITE ${WORK}/seed/sparse.json "{\"module\": \"sparse_attention\", \"d_model\": 16, \"num_heads\": 4, \"window_size\": 2}")
expect(1 "missing \\([0-9]+\\): attn\\.W_q\\.weight" run --config ${WORK}/seed/sparse.json
  --weights ${WORK}/seed/4/w.safetensors --inputs ${WORK}/seed/4/in.safetensors --out ${WORK}/seed/out2.safetensors)
file(WRITE ${WORK}/seed/performer.json
  "{\"module\": \"performer_attention\", \"d_model\": 12, \"num_heads\": 2, \"num_features\": 16}")
expect(1 "buffer 'R' has shape \\[2, 6, 12\\], expected \\[2, 6, 16\\]" run --config ${WORK}/seed/performer.json
  --weights ${WORK}/seed/9/w.safetensors --inputs ${WORK}/seed/9/in.safetensors --out ${WORK}/seed/out3.safetensors)

# ---- non-finite values (tests/parity/gen_nonfinite.py): attn run propagates a NaN / Inf / F64 1e300
# in a weight, an input or a float attn_mask to PyTorch's positions (exit 0); with --check-finite
# the same files are an error naming the tensor, the first bad index and the value, and OUT is not
# written. Cases: 0 NaN in in_proj_weight, 2 F64 1e300 in in_proj_weight, 8 +Inf in linear2.weight
# (encoder layer), 21 +Inf in key, 28 NaN in attn_mask, 29 -inf in attn_mask (a masked entry: no
# error). Then finite files whose output overflows (3e38 in a weight and in the query).
set(nf_fx ${FIXTURES}/nonfinite.safetensors)
foreach(pair "0;weights.*'in_proj_weight'\\[3, 2\\] is nan"
             "2;weights.*'in_proj_weight'\\[23, 4\\] is 1e\\+300 \\(F64. inf in float32\\)"
             "8;weights.*'linear2.weight'\\[4, 9\\] is inf"
             "21;inputs.*'key'\\[1, 4, 0\\] is inf"
             "28;inputs.*'attn_mask'\\[1, 3\\] is nan"
             "29;-")
  list(GET pair 0 case)
  list(GET pair 1 msg)
  set(dir ${WORK}/nonfinite/${case})
  file(MAKE_DIRECTORY ${dir})
  execute_process(COMMAND ${SEED_HELPER} --split ${nf_fx} ${case} ${dir} RESULT_VARIABLE got ERROR_VARIABLE err)
  if(NOT got STREQUAL "0")
    message(SEND_ERROR "splitting ${nf_fx} case ${case}: exit ${got}, ${err}")
  endif()
  set(files --config ${dir}/model.json --weights ${dir}/w.safetensors --inputs ${dir}/in.safetensors)
  expect(0 "^$" run ${files} --out ${dir}/out.safetensors)
  execute_process(COMMAND ${NONFINITE_HELPER} --compare ${dir}/out.safetensors ${nf_fx} ${case}
    RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT got STREQUAL "0")
    message(SEND_ERROR "attn run on ${nf_fx} case ${case}: ${out}${err}")
  else()
    message(STATUS "ok: attn run on non-finite case ${case}: ${out}")
  endif()
  if(msg STREQUAL "-")
    expect(0 "^$" run ${files} --out ${dir}/checked.safetensors --check-finite)
  else()
    expect_one_line_error(1 run ${files} --out ${dir}/checked.safetensors --check-finite)
    expect(1 "^attn: run: --check-finite: ${msg}\n$" run ${files} --out ${dir}/checked.safetensors --check-finite)
    if(EXISTS ${dir}/checked.safetensors)
      message(SEND_ERROR "attn run --check-finite wrote ${dir}/checked.safetensors for case ${case}")
    endif()
  endif()
endforeach()
set(dir ${WORK}/nonfinite/29)
execute_process(COMMAND ${NONFINITE_HELPER} --set ${dir}/w.safetensors ${dir}/big_w.safetensors in_proj_weight 0 3e38
  RESULT_VARIABLE got1)
execute_process(COMMAND ${NONFINITE_HELPER} --set ${dir}/in.safetensors ${dir}/big_in.safetensors query 0 3e38
  RESULT_VARIABLE got2)
if(NOT got1 STREQUAL "0" OR NOT got2 STREQUAL "0")
  message(SEND_ERROR "test_nonfinite --set failed: ${got1} ${got2}")
endif()
set(files --config ${dir}/model.json --weights ${dir}/big_w.safetensors --inputs ${dir}/big_in.safetensors)
expect(0 "^$" run ${files} --out ${dir}/big_out.safetensors)
expect(1 "^attn: run: --check-finite: output 'output'\\[0, 0, 0\\] is (nan|inf|-inf) \\(weights and inputs are finite\\); not written\n$"
  run ${files} --out ${dir}/big_checked.safetensors --check-finite)
if(EXISTS ${dir}/big_checked.safetensors)
  message(SEND_ERROR "attn run --check-finite wrote an output with a non-finite value")
endif()

# ---- safe output: attn run refuses an --out that is one of its inputs, that is not a regular file,
# or that holds something other than a safetensors file (unless --force) ----
set(d2 ${WORK}/seed/2)
set(run2 run --config ${d2}/model.json --weights ${d2}/w.safetensors --inputs ${d2}/in.safetensors)
file(SHA256 ${d2}/in.safetensors in_sum)
expect(1 "--out '.*in.safetensors' is the same file as the input" ${run2} --out ${d2}/in.safetensors)
expect(1 "same file as the input '.*w.safetensors'" ${run2} --out ${d2}/w.safetensors)
expect(1 "same file as the input '.*model.json'" ${run2} --out ${d2}/model.json)
file(SHA256 ${d2}/in.safetensors in_sum2)
if(NOT in_sum STREQUAL in_sum2)
  message(SEND_ERROR "attn run --out INPUTS changed the inputs")
endif()
file(CREATE_LINK ${d2}/in.safetensors ${d2}/link.safetensors SYMBOLIC)
expect(1 "same file as the input" ${run2} --out ${d2}/link.safetensors)
file(CREATE_LINK ${d2}/nowhere ${d2}/dangling.safetensors SYMBOLIC)
expect(1 "is a symbolic link; only a regular file is replaced" ${run2} --out ${d2}/dangling.safetensors)
# not a regular file: a FIFO of the test's own (never a real device: a regression would replace it)
execute_process(COMMAND mkfifo ${d2}/out.fifo)
expect(1 "is a FIFO; only a regular file is replaced" ${run2} --out ${d2}/out.fifo)
file(WRITE ${d2}/notes.txt "my notes\n")
expect(1 "'.*notes.txt' exists and is not a safetensors file: refusing to replace it.*--force" ${run2} --out ${d2}/notes.txt)
file(READ ${d2}/notes.txt notes)
if(NOT notes STREQUAL "my notes\n")
  message(SEND_ERROR "attn run --out NOTES changed the file")
endif()
expect(0 "^$" ${run2} --out ${d2}/notes.txt --force)
expect(0 "^$" ${run2} --out ${d2}/out.safetensors) # replacing a safetensors file needs no --force
file(GLOB leftovers ${d2}/*.tmp*)
if(leftovers)
  message(SEND_ERROR "temporary files left behind: ${leftovers}")
endif()

# ---- safe input: a FIFO, a device or an oversized config fails at once (no hang, no huge read) ----
find_program(MKFIFO mkfifo)
if(MKFIFO)
  execute_process(COMMAND ${MKFIFO} ${WORK}/fifo)
  expect(1 "cannot read '.*fifo': it is a FIFO, not a regular file" run --config ${WORK}/fifo
    --weights ${d2}/w.safetensors --inputs ${d2}/in.safetensors --out ${WORK}/o.safetensors)
  expect(1 "fifo: .*not a regular file" run --config ${d2}/model.json --weights ${WORK}/fifo
    --inputs ${d2}/in.safetensors --out ${WORK}/o.safetensors)
  expect(1 "fifo: .*not a regular file" run --config ${d2}/model.json --weights ${d2}/w.safetensors
    --inputs ${WORK}/fifo --out ${WORK}/o.safetensors)
  expect(1 "fifo.*not a regular file" inspect ${WORK}/fifo)
endif()
expect(1 "cannot read '/dev/zero': it is a character device, not a regular file" run --config /dev/zero
  --weights ${d2}/w.safetensors --inputs ${d2}/in.safetensors --out ${WORK}/o.safetensors)
find_program(TRUNCATE truncate)
if(TRUNCATE)
  execute_process(COMMAND ${TRUNCATE} -s 17M ${WORK}/big.json)
  expect(1 "cannot read '.*big.json': 17825792 bytes, over the cap of 16 MB for a config file" run
    --config ${WORK}/big.json --weights ${d2}/w.safetensors --inputs ${d2}/in.safetensors --out ${WORK}/o.safetensors)
endif()

# ---- configs: a repeated key is an error (which one would win is not the user's guess), and so
# is a NUL inside a name ----
file(WRITE ${WORK}/dup.json "{\"module\": \"sparse_attention\", \"d_model\": 16, \"num_heads\": 4, \"window_size\": 2, \"d_model\": 32}")
expect(1 "dup.json: line 1 column [0-9]+: duplicate key .d_model." run --config ${WORK}/dup.json --weights ${d2}/w.safetensors
  --inputs ${d2}/in.safetensors --out ${WORK}/o.safetensors)
file(WRITE ${WORK}/nul.json "{\"module\": \"sparse_attention\\u0000x\", \"d_model\": 16, \"num_heads\": 4, \"window_size\": 2}")
expect(1 "nul.json: config: key 'module' contains a NUL character" run --config ${WORK}/nul.json --weights ${d2}/w.safetensors
  --inputs ${d2}/in.safetensors --out ${WORK}/o.safetensors)
file(WRITE ${WORK}/nulkey.json "{\"module\": \"sparse_attention\", \"d_model\": 16, \"num_heads\": 4, \"window_size\": 2, \"x\\u0000\": 1}")
expect(1 "nulkey.json: .*contains a NUL character" run --config ${WORK}/nulkey.json --weights ${d2}/w.safetensors
  --inputs ${d2}/in.safetensors --out ${WORK}/o.safetensors)

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
# bench scaling: every variant this build has, JSON keys (impl, shape with n, ms, extra_bytes), the plot
expect(0 "\"impl\": \"flash\", \"shape\": {\"b\": 1, \"h\": 2, \"n\": 64, \"d\": 16}, \"threads\": 1, \"ms\": [0-9.e+-]+, \"extra_bytes\": [0-9]+.*\"impl\": \"window\".*\"n\": 128"
  bench scaling --n 64,128 --h 2 --d 16 --threads 1 --backward --json --svg ${WORK}/scaling.svg)
file(READ ${WORK}/scaling.svg svg)
if(NOT svg MATCHES "^<svg .*sequence length N \\(log scale\\).*<polyline.*flash, 1 thread.*</svg>")
  message(SEND_ERROR "bench scaling --svg: unexpected plot:\n${svg}")
endif()
# the plot is written safely too: never over a device, never over a file of another kind
execute_process(COMMAND mkfifo ${WORK}/plot.fifo)
expect(1 "output '.*plot.fifo' is a FIFO" bench scaling --impl flash --n 64 --h 1
  --d 16 --threads 1 --svg ${WORK}/plot.fifo)
file(WRITE ${WORK}/plot.txt "my notes\n")
# refused before any measurement (the one line is all the output), the file kept; --force replaces it
expect(1 "^attn: bench scaling: --svg '[^']*plot.txt' exists and is not an SVG file: refusing to replace it \\(remove it, choose another path, or add --force\\)\n$"
  bench scaling --impl flash --n 64 --h 1 --d 16 --threads 1 --svg ${WORK}/plot.txt)
file(READ ${WORK}/plot.txt notes)
if(NOT notes STREQUAL "my notes\n")
  message(SEND_ERROR "bench scaling --svg changed a file it refused: ${notes}")
endif()
expect(0 "plot written to .*plot.txt" bench scaling --impl flash --n 64 --h 1 --d 16 --threads 1
  --svg ${WORK}/plot.txt --force)
file(READ ${WORK}/plot.txt notes)
if(NOT notes MATCHES "^<svg ")
  message(SEND_ERROR "bench scaling --svg --force did not write the plot: ${notes}")
endif()
expect(0 "window beats flash|window does not beat flash" bench scaling --impl flash,window --n 64,128 --h 1 --d 16 --threads 1)
expect_one_line_error(2 bench scaling --impl nonsense)
expect_one_line_error(2 bench scaling --n 8)

# the shared option parser (tools/cli_opts.c), through several commands
# --name=value is the same as --name value
expect(0 "\"op\": *\"attention\".*\"impl\": *\"sdpa\".*\"n\": *32"
  bench attention --impl=sdpa --b=1 --h=1 --n=32 --d=16 --threads=1 --repeats=5 --json)
expect(2 "run: missing --weights" run --config=${WORK}/model.json)
expect(1 "train gpt: cannot read '${WORK}/none\\.txt'" train gpt --data=${WORK}/none.txt --layers=1)
expect_usage_error("demo: --steps wants an integer in 1\\.\\.10000000, got 'abc'" demo --steps=abc)
# a missing value
expect_usage_error("bench gemm: --m needs a value" bench gemm --m)
expect_usage_error("bench gemm: --packed-b applies to the bf16 row: add --dtype bf16" bench gemm --m 64 --packed-b)
expect(0 "\"impl\": *\"attn.bf16_from_f32_packed_b\".*\"gflops\"" bench gemm --m 40 --n 70 --k 33 --trans TN --dtype bf16 --packed-b --from-f32 --threads 1 --json)
expect_usage_error("run: --config needs a value" run --config)
expect_usage_error("demo: --seed needs a value" demo --seed)
expect_usage_error("sample: --prompt needs a value" sample x.safetensors --prompt)
expect_usage_error("train gpt: --data needs a non-empty value" train gpt --data=)
# out of range: the message names the option, the value and the bounds
expect_usage_error("bench attention: --d wants .*1\\.\\.512, got '1000'" bench attention --d 1000)
expect_usage_error("bench gemm: --threads wants .*1\\.\\.1024, got '1,0'" bench gemm --threads 1,0)
expect_usage_error("train gpt: --layers wants an integer in 1\\.\\.256, got '300'" train gpt --data x --layers=300)
expect_usage_error("demo: --lr wants a number in \\[1e-07, 1\\], got '2'" demo --lr 2)
expect_usage_error("train gpt: --lr wants a number in \\(0, 10\\], got '0'" train gpt --data x --lr 0)
expect_usage_error("run: --threads wants an integer in 1\\.\\.4096, got '0'" run --threads=0)
expect_usage_error("sample: --seed wants an integer >= 0, got '-5'" sample x.safetensors --seed -5)
# an integer out of range is called that, with the bounds (1e12 is an integer); a fraction is not one
expect_usage_error("sample: --tokens wants an integer in 0\\.\\.1073741824, got '1e12' \\(out of range\\)"
  sample x.safetensors --tokens 1e12)
expect_usage_error("run: --threads wants an integer in 1\\.\\.4096, got '100000' \\(out of range\\)" run --threads 100000)
expect_usage_error("demo: --threads wants an integer in 1\\.\\.1024, got '99999999999999999999' \\(out of range\\)"
  demo --threads 99999999999999999999)
expect_usage_error("run: --threads wants an integer in 1\\.\\.4096, got '2\\.5' \\(not an integer\\)" run --threads 2.5)
expect_usage_error("demo: --lr wants a number in \\[1e-07, 1\\], got '1e300' \\(out of range\\)" demo --lr 1e300)
# configuration integers: range-checked as 64-bit values, each message naming its key and bound
set(d2c ${WORK}/nonfinite/29)
foreach(pair "{\"module\": \"multihead_attention\", \"embed_dim\": 4294967312, \"num_heads\": 4}|attn_mha_create: embed_dim \\(4294967312\\) must be in \\[1, 2\\^24\\]"
             "{\"module\": \"multihead_attention\", \"embed_dim\": 16, \"num_heads\": 4294967312}|attn_mha_create: num_heads \\(4294967312\\) must be in \\[1, embed_dim \\(16\\)\\] and divide embed_dim"
             "{\"module\": \"multihead_attention\", \"embed_dim\": 16, \"num_heads\": 4, \"kdim\": 4294967312}|kdim \\(4294967312\\) and vdim \\(0\\) must be in \\[1, 2\\^24\\]"
             "{\"module\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 1e18}|attn_encoder_layer_create: nhead \\(1000000000000000000\\) must be in \\[1, d_model \\(16\\)\\] and divide d_model"
             "{\"module\": \"transformer_encoder_layer\", \"d_model\": 4294967312, \"nhead\": 4}|d_model \\(4294967312\\) must be in \\[1, 2\\^24\\]"
             "{\"module\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 1e19}|key 'nhead' \\(1e\\+19\\) is out of range: at most 2\\^63 - 1 in magnitude"
             "{\"module\": \"transformer_encoder_layer\", \"d_model\": 16, \"nhead\": 4.5}|key 'nhead' must be an integer, got 4.5")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 cfg)
  list(GET pair 1 msg)
  file(WRITE ${WORK}/range.json "${cfg}")
  expect(1 "^attn: run: [^:]*range.json: [^\n]*${msg}[^\n]*\n$" run --config ${WORK}/range.json --weights ${d2c}/w.safetensors
    --inputs ${d2c}/in.safetensors --out ${WORK}/range.safetensors)
endforeach()
string(REPEAT "1," 64 many)
expect_usage_error("bench gemm: --m takes at most 64 values" bench gemm --m ${many}1)
# unknown options (also in the --name=value form), values given to flags, extra arguments
expect_usage_error("bench train: unknown option '--bogus'" bench train --bogus=1)
expect_usage_error("run: unknown option '--nope'" run --nope)
expect_usage_error("inspect: unknown option '-x'" inspect -x)
expect_usage_error("sample: unknown option '--frob'" sample x.safetensors --frob 3)
expect_usage_error("bench peak: unknown option '--n'" bench peak --n 4)
expect_usage_error("bench attention: --causal takes no value" bench attention --causal=1)
expect_usage_error("sample: unexpected argument 'y'" sample x.safetensors y)
# --help anywhere before "--" wins; "--" ends the options
expect(0 "usage: attn bench gemm" bench gemm --m 64 --help)
expect(0 "usage: attn sample" sample x.safetensors --tokens -1 -h)
expect(1 "inspect: -x: " inspect -- -x)

# OpenBLAS is attn bench gemm's peer, loaded by that command at run time: the tool does not link it
# (every other command would start its threads), so it is no NEEDED entry of the binary.
find_program(READELF readelf)
if(READELF)
  execute_process(COMMAND ${READELF} -d ${ATTN} OUTPUT_VARIABLE dyn RESULT_VARIABLE rrc)
  if(NOT rrc EQUAL 0 OR NOT dyn MATCHES "NEEDED" OR dyn MATCHES "openblas")
    message(SEND_ERROR "attn's dynamic section (want no libopenblas):\n${dyn}")
  endif()
endif()

# ---- issue #28: attn embed never writes over a file of its --model folder (refused before the
# model is opened, so a folder of placeholder files serves), whatever the spelling; --force does not
# allow it; a new file there is not refused for that reason ----
file(MAKE_DIRECTORY ${WORK}/emodel/1_Pooling)
file(WRITE ${WORK}/emodel/config.json "{}")
file(WRITE ${WORK}/emodel/model.safetensors "weights")
file(WRITE ${WORK}/emodel/1_Pooling/out.npy "pooling")
file(WRITE ${WORK}/etexts.txt "hello\n")
foreach(o emodel/model.safetensors emodel/../emodel/./model.safetensors emodel/1_Pooling/out.npy)
  execute_process(COMMAND ${ATTN} embed --model emodel --input etexts.txt --out ${o} --force WORKING_DIRECTORY ${WORK}
    RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  file(READ ${WORK}/emodel/model.safetensors w)
  file(READ ${WORK}/emodel/1_Pooling/out.npy pl)
  if(NOT got EQUAL 1 OR NOT err MATCHES "^attn: embed: --out '[^']+' is a file of the model folder 'emodel' \\(--model\\)"
     OR NOT w STREQUAL "weights" OR NOT pl STREQUAL "pooling")
    message(SEND_ERROR "attn embed --out ${o} inside --model: exit ${got} (want 1, refused, files kept):\n${err}")
  else()
    message(STATUS "ok: attn embed --out ${o} inside --model -> ${got}: ${err}")
  endif()
endforeach()
execute_process(COMMAND ${ATTN} embed --model emodel --input etexts.txt --out emodel/new.npy WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE got ERROR_VARIABLE err)
if(err MATCHES "model folder" OR got EQUAL 0)
  message(SEND_ERROR "attn embed --out emodel/new.npy (a new file): exit ${got}, want the model's own error:\n${err}")
else()
  message(STATUS "ok: a new file in the model folder is not refused as one of its files: ${err}")
endif()
# attn viz --model likewise, for each of its outputs (checked before the model is run)
foreach(o "--html;emodel/config.json" "--svg;emodel/1_Pooling/out.npy" "--csv;emodel/./config.json")
  execute_process(COMMAND ${ATTN} viz --model emodel --text hi ${o} --force WORKING_DIRECTORY ${WORK}
    RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  file(READ ${WORK}/emodel/config.json c)
  file(READ ${WORK}/emodel/1_Pooling/out.npy pl)
  if(NOT got EQUAL 1 OR NOT err MATCHES "^attn: viz: --[a-z]+ '[^']+' is a file of the model folder 'emodel' \\(--model\\)"
     OR NOT c STREQUAL "{}" OR NOT pl STREQUAL "pooling")
    message(SEND_ERROR "attn viz ${o} inside --model: exit ${got} (want 1, refused, files kept):\n${err}")
  else()
    message(STATUS "ok: attn viz ${o} inside --model -> ${got}: ${err}")
  endif()
endforeach()
