# attn tokenize: ids of a BERT vocab.txt for --text, --input FILE and standard input, --decode,
# --max-length, --no-special, --max-line-bytes, --help, and its usage errors and failures (one line, exit 2 / 1).
# Hugging Face parity itself is the tokenizer_parity test's (tests/hf/tokenizer_parity.py).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# check(RC REGEX [INPUT file] args...): exit code RC, stdout+stderr matching REGEX (whole output).
function(check rc regex)
  set(args ${ARGN})
  set(input "")
  list(GET args 0 first)
  if(first STREQUAL "INPUT")
    list(GET args 1 input)
    list(REMOVE_AT args 0 1)
    execute_process(COMMAND ${ATTN} tokenize ${args} INPUT_FILE ${input} RESULT_VARIABLE got OUTPUT_VARIABLE out
      ERROR_VARIABLE err TIMEOUT 60)
  else()
    execute_process(COMMAND ${ATTN} tokenize ${args} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err
      TIMEOUT 60)
  endif()
  if(NOT got STREQUAL "${rc}" OR NOT "${out}${err}" MATCHES "${regex}")
    message(SEND_ERROR "attn tokenize ${args}: exit ${got} (want ${rc}), output:\n${out}${err}\n(want /${regex}/)")
  else()
    message(STATUS "ok: attn tokenize ${args} -> ${got}")
  endif()
endfunction()

file(WRITE ${WORK}/vocab.txt "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n!\n,\n")
set(V ${WORK}/vocab.txt)
check(0 "^usage: attn tokenize" --help)
check(0 "^2 5 8 6 7 3\n$" --model ${V} --text "Hello, World!")
check(0 "^5 8 6 7\n$" --model ${V} --text "Hello, World!" --no-special)
check(0 "^2 5 3\n$" --model ${V} --text "Hello, World!" --max-length 3)
check(0 "^2 3\n$" --model ${V} --text " ")
file(WRITE ${WORK}/lines.txt "hello\n\nWORLD x\n")
check(0 "^2 5 3\n2 3\n2 6 1 3\n$" --model ${V} --input ${WORK}/lines.txt)
check(0 "^2 5 3\n2 3\n2 6 1 3\n$" INPUT ${WORK}/lines.txt --model ${V} --input -)
check(0 "^\\[CLS\\] hello, world! \\[SEP\\]\n$" --model ${V} --decode --text "2 5 8 6 7 3")
check(0 "^hello, world!\n$" --model ${V} --decode --no-special --text "2 5 8 6 7 3")
file(WRITE ${WORK}/ids.txt "2 5 3\n\n6 99 7\n")
check(0 "^\\[CLS\\] hello \\[SEP\\]\n\nworld!\n$" --model ${V} --decode --input ${WORK}/ids.txt)
# usage errors (exit 2) and failures (exit 1), one line each
check(2 "^attn: tokenize: missing --model" --text x)
check(2 "^attn: tokenize: give one of --text and --input" --model ${V})
check(2 "^attn: tokenize: give one of --text and --input" --model ${V} --text x --input ${WORK}/lines.txt)
check(2 "^attn: tokenize: --max-length" --model ${V} --text x --max-length 0)
check(1 "^attn: tokenize: .*'${WORK}/none'" --model ${WORK}/none --text x)
check(1 "^attn: tokenize: line 1: 'x' is not an id\n$" --model ${V} --decode --text "2 x")
file(WRITE ${WORK}/bad.json "{\"model\": {\"type\": \"Unigram\"}}")
check(1 "^attn: tokenize: bad.json: unsupported: model.type = Unigram\n$" --model ${WORK}/bad.json --text x)
string(ASCII 255 ff)
file(WRITE ${WORK}/bad_utf8.txt "hello\nab${ff}\n")
check(1 "^2 5 3\nattn: tokenize: line 2: attn_tokenizer_encode: the text is not valid UTF-8" --model ${V}
  --input ${WORK}/bad_utf8.txt)
# --max-line-bytes: a line at the cap is encoded, a longer one refused naming the cap (memory stays
# bounded: the line is not read past it; the default, 64 MiB, is the same code with a larger cap)
file(WRITE ${WORK}/long.txt "hello\nhello world hello\nworld\n")
check(0 "^2 5 3\n2 5 6 5 3\n2 6 3\n$" --model ${V} --input ${WORK}/long.txt --max-line-bytes 17)
check(1 "^2 5 3\nattn: tokenize: .*long.txt: line 2 is longer than --max-line-bytes 16\n$" --model ${V}
  --input ${WORK}/long.txt --max-line-bytes 16)
check(1 "^attn: tokenize: standard input: line 1 is longer than --max-line-bytes 4\n$" INPUT ${WORK}/long.txt
  --model ${V} --input - --max-line-bytes 4)
check(2 "^attn: tokenize: --max-line-bytes" --model ${V} --text x --max-line-bytes 0)
