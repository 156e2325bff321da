# The walls between layers (docs/architecture.md): which directory may include what. Run with
# -DROOT=<source dir>. Each rule: the files of a directory, and the include paths they must not
# name. A violation lists the file, the line and the rule.
#   src/core     names no kernel family, attention, module, io or training code (feature detection,
#                tensors, threads, status only: the registry of kernels lives in src/kernels);
#   src/kernels  nothing of attention, nn, train, io (kernels know only core and each other);
#   src/io       nothing of nn, train or attention, and not the umbrella attn.h;
#   src/nn, src/attention, src/kernels, src/io, src/core  nothing of src/models (the Hugging Face
#                families sit above the modules they are built from);
#   src/text     (tokenizers) only core and io: nothing of kernels, attention, nn, train, viz, dist;
#   tools/       only the public headers (attn/...) and tools' own (no path with a '/' but attn/).
set(fails "")
function(check dir pattern why)
  file(GLOB files ${ROOT}/${dir}/*.c ${ROOT}/${dir}/*.h)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(l ${lines})
      if(l MATCHES "${pattern}")
        file(RELATIVE_PATH rel ${ROOT} ${f})
        set(fails "${fails}\n  ${rel}: ${l}  (${why})")
      endif()
    endforeach()
  endforeach()
  set(fails "${fails}" PARENT_SCOPE)
endfunction()
check(src/core "\"(kernels|attention|nn|io|train|viz|dist)/" "src/core names no higher layer")
check(src/core "\"attn/(attention|nn|model|train|viz|dist|kernels|introspect)\\.h\"" "src/core includes only core headers")
check(src/kernels "\"(attention|nn|io|train|viz|dist)/" "src/kernels knows nothing of attention or above")
check(src/kernels "\"attn/(attention|nn|mha|layers|model|train|viz|dist|gpt|vit|seq2seq|attn)\\.h\"" "src/kernels knows nothing of attention or above")
check(src/io "\"(nn|train|attention|viz|dist)/" "src/io knows nothing of nn")
check(src/io "\"attn/(attn|nn|mha|layers|model|train|gpt|vit|seq2seq)\\.h\"" "src/io knows nothing of nn")
foreach(d src/nn src/attention src/kernels src/io src/core)
  check(${d} "\"(models/|attn/pretrained\\.h\")" "only src/models and above know the Hugging Face families")
endforeach()
check(src/text "\"(kernels|attention|nn|train|viz|dist)/" "src/text includes only core and io")
check(src/text "\"attn/(attn|kernels|introspect|attention|nn|mha|layers|model|train|viz|dist|gpt|vit|seq2seq|params|positions|precision|capture|longformer|linear_attention)\\.h\"" "src/text includes only core and io")
check(tools "\"[^\"]*/[^\"]*\"" "tools/ includes only public headers")
# the rule above flags every path with a '/'; attn/ is the one allowed
string(REGEX REPLACE "\n  tools/[^\n]*: *#[ \t]*include[ \t]*\"attn/[^\n]*" "" fails "${fails}")
if(fails)
  message(FATAL_ERROR "includes across a layer's wall:${fails}")
endif()
message(STATUS "layers: every include within its layer's walls")
