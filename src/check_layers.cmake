# cmake -DSRC_DIR=src -P check_layers.cmake: fails, naming each, on an
# include that points up the layers (layers.cmake).
cmake_minimum_required(VERSION 3.24)
include(${CMAKE_CURRENT_LIST_DIR}/layers.cmake)
px_require_layers(${SRC_DIR})
list(JOIN PX_LAYERS " < " order)
message(STATUS "the layers hold: ${order}")
