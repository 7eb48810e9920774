# The layers of src/, lowest first (docs/architecture.md). A layer's files
# include only layers before it in this list: px_layer_violations, run at
# configure time (the top CMakeLists.txt) and by the test
# Layers.IncludeOnlyLayersBelow, names an include that points up (serving,
# say, included from the runtime: it would compile, the header being on
# the include path, and tie the runtime to HTTP). The link order is the
# same list: each layer's library links only layers below it.
set(PX_LAYERS core kernels graph nn data comm parallel plan runtime serve report cli)

# px_layer_violations(SRC_DIR OUT): in OUT, one line per
# `#include "<layer>/..."` in SRC_DIR/<layer>/**/*.{h,cc} that names a
# layer above the including file's own. Empty: the layers hold.
function(px_layer_violations src_dir out)
  get_filename_component(src_dir ${src_dir} ABSOLUTE)
  list(JOIN PX_LAYERS " < " order)
  list(JOIN PX_LAYERS "|" alternatives)
  set(found "")
  foreach(layer IN LISTS PX_LAYERS)
    list(FIND PX_LAYERS ${layer} level)
    file(GLOB_RECURSE files RELATIVE ${src_dir} ${src_dir}/${layer}/*.h ${src_dir}/${layer}/*.cc)
    foreach(file IN LISTS files)
      file(STRINGS ${src_dir}/${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"(${alternatives})/")
      foreach(include IN LISTS includes)
        string(REGEX REPLACE "^[^\"]*\"([^/\"]*).*" "\\1" target "${include}")
        list(FIND PX_LAYERS "${target}" target_level)
        if(target_level GREATER level)
          list(APPEND found "${file}: ${include}: layer ${target} is above ${layer} (${order})")
        endif()
      endforeach()
    endforeach()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# px_require_layers(SRC_DIR): a fatal error naming every violation, if any.
function(px_require_layers src_dir)
  px_layer_violations(${src_dir} violations)
  if(violations)
    list(JOIN violations "\n  " text)
    message(FATAL_ERROR "includes that point up the layers:\n  ${text}")
  endif()
endfunction()
