# cmake -DRUNTIME_DIR=src/runtime -P check_rooms.cmake: fails, naming each,
# on an include that points up the runtime's rooms (rooms.cmake).
cmake_minimum_required(VERSION 3.24)
include(${CMAKE_CURRENT_LIST_DIR}/rooms.cmake)
px_require_runtime_rooms(${RUNTIME_DIR})
list(JOIN PX_RUNTIME_ROOMS " < " order)
message(STATUS "the runtime's rooms hold: ${order}")
