# Checks that docs/sdk.md names every header of the installed C++ SDK
# (sdk/include/tessera/sdk/*.hpp) in backticks, so a new header cannot be
# added without saying what it is for.
#
#   cmake -DSDK_DIR=<sdk/include/tessera/sdk> -DDOC=<docs/sdk.md> -P headers_documented.cmake
cmake_minimum_required(VERSION 3.25)
if(NOT SDK_DIR OR NOT DOC)
  message(FATAL_ERROR "headers_documented.cmake: SDK_DIR and DOC are required")
endif()
file(GLOB headers RELATIVE "${SDK_DIR}" "${SDK_DIR}/*.hpp")
list(LENGTH headers count)
if(count EQUAL 0)
  message(FATAL_ERROR "no header found in ${SDK_DIR}")
endif()
file(READ "${DOC}" text)
set(missing "")
foreach(header IN LISTS headers)
  string(FIND "${text}" "`${header}`" at_plain)
  string(FIND "${text}" "`tessera/sdk/${header}`" at_path)
  if(at_plain EQUAL -1 AND at_path EQUAL -1)
    list(APPEND missing "${header}")
  endif()
endforeach()
if(missing)
  list(JOIN missing ", " missing)
  message(FATAL_ERROR "${DOC} does not name these SDK headers: ${missing}")
endif()
message(STATUS "${DOC} names all ${count} SDK headers")
