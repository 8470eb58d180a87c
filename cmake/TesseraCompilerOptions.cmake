# Warnings and sanitizers applied to every target of the project.

set(TESSERA_WARNING_FLAGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wnull-dereference
    -Wimplicit-fallthrough)

# Applies the project's warning flags to `target` (C++ sources only).
function(tessera_target_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TESSERA_WARNING_FLAGS}>)
  if(TESSERA_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

if(TESSERA_SANITIZE)
  string(REPLACE ";" "," _tessera_san "${TESSERA_SANITIZE}")
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_tessera_san};-fno-omit-frame-pointer;-fno-sanitize-recover=all>")
  add_link_options(-fsanitize=${_tessera_san})
  message(STATUS "Tessera: sanitizers ${_tessera_san}")
endif()

# __FILE__ (in the location TESSERA_CHECK appends to its messages) relative
# to the source tree, so messages and binaries carry no path of the build
# machine.
# (C and C++ only: nvcc, for the CUDA units, has no such flag.)
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fmacro-prefix-map=${PROJECT_SOURCE_DIR}/=>")

# Unity builds (CMAKE_UNITY_BUILD=ON, which scripts/common.sh passes): the
# generated unity sources #include the .cpp files, and clang-tidy, which
# scripts/tidy.sh runs over those unity sources, would report each include
# as bugprone-suspicious-include. A target of TESSERA_UNITY_SPLIT_AT sources
# or more is compiled in two halves instead of one: on two cores its one
# long translation unit would otherwise be the tail of the build (the core
# library at the start, the strategy tests at the end). Called once at the
# end of the top-level CMakeLists.txt, for every target of the project.
set(TESSERA_UNITY_SPLIT_AT 24 CACHE STRING
    "Unity builds: targets with at least this many sources compile in two batches")
function(tessera_unity_build_settings dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY" AND NOT type STREQUAL "UTILITY")
      set_property(TARGET ${target} PROPERTY UNITY_BUILD_CODE_BEFORE_INCLUDE
                   "// NOLINTNEXTLINE(bugprone-suspicious-include)")
      get_target_property(sources ${target} SOURCES)
      list(FILTER sources INCLUDE REGEX "[.]cpp$")
      list(LENGTH sources count)
      if(count GREATER_EQUAL TESSERA_UNITY_SPLIT_AT)
        math(EXPR half "(${count} + 1) / 2")
        set_property(TARGET ${target} PROPERTY UNITY_BUILD_BATCH_SIZE ${half})
      endif()
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    tessera_unity_build_settings("${subdir}")
  endforeach()
endfunction()
