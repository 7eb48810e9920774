# The runtime's rooms, lowest first. A room includes and links only rooms
# before it in this list: each is a static library px_runtime_<room>
# linking the one just below (src/runtime/CMakeLists.txt), and
# px_runtime_room_violations below, run at configure time and by the test
# Runtime.RoomsIncludeOnlyRoomsBelow, refuses an include that points up.
# docs/architecture.md ("The runtime's rooms") says what each holds.
set(PX_RUNTIME_ROOMS calibrate state optimizer fault checkpoint executor decode tasks train parameter_server sync launch)

# px_runtime_room_violations(RUNTIME_DIR OUT): in OUT, one line per
# `#include "runtime/<room>/..."` in RUNTIME_DIR/<room>/*.{h,cc} that names
# a room above the including file's own (or a folder that is no room), and
# one per folder of RUNTIME_DIR that is no room. Empty: the rooms hold.
function(px_runtime_room_violations runtime_dir out)
  get_filename_component(runtime_dir ${runtime_dir} ABSOLUTE)
  list(JOIN PX_RUNTIME_ROOMS " < " order)
  set(found "")
  file(GLOB folders LIST_DIRECTORIES true RELATIVE ${runtime_dir} ${runtime_dir}/*)
  foreach(folder IN LISTS folders)
    if(IS_DIRECTORY ${runtime_dir}/${folder} AND NOT folder IN_LIST PX_RUNTIME_ROOMS)
      list(APPEND found "runtime/${folder}/ is no room: add it to PX_RUNTIME_ROOMS in src/runtime/rooms.cmake")
    endif()
  endforeach()
  foreach(room IN LISTS PX_RUNTIME_ROOMS)
    list(FIND PX_RUNTIME_ROOMS ${room} level)
    file(GLOB files RELATIVE ${runtime_dir} ${runtime_dir}/${room}/*.h ${runtime_dir}/${room}/*.cc)
    foreach(file IN LISTS files)
      file(STRINGS ${runtime_dir}/${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"runtime/")
      foreach(include IN LISTS includes)
        string(REGEX REPLACE "^[^\"]*\"runtime/([^/\"]*).*" "\\1" target "${include}")
        list(FIND PX_RUNTIME_ROOMS "${target}" target_level)
        if(target_level EQUAL -1)
          list(APPEND found "runtime/${file}: ${include}: runtime/${target} is no room")
        elseif(target_level GREATER level)
          list(APPEND found "runtime/${file}: ${include}: room ${target} is above ${room} (${order})")
        endif()
      endforeach()
    endforeach()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# px_require_runtime_rooms(RUNTIME_DIR): a fatal error naming every
# violation px_runtime_room_violations finds, if any.
function(px_require_runtime_rooms runtime_dir)
  px_runtime_room_violations(${runtime_dir} violations)
  if(violations)
    list(JOIN violations "\n  " text)
    message(FATAL_ERROR "includes that point up the runtime's rooms:\n  ${text}")
  endif()
endfunction()
