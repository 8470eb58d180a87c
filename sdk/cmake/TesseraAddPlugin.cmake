# tessera_add_plugin(NAME <name> KIND <backend|strategy|compressor|selector|model>
#                    SOURCES <files...> [LINK_LIBRARIES <libs...>]
#                    [OUTPUT_DIRECTORY <dir>] [INSTALL])
#
# Builds the MODULE library libtessera_<kind>_<name>.so against Tessera::sdk,
# with every symbol hidden except the entry point `tessera_plugin_entry`
# (visibility flags plus a linker version script) and no undefined symbols
# left for the host to provide. INSTALL installs it into the plugin directory.
# The CMake target is named tessera_<kind>_<name>.

set(_TESSERA_ADD_PLUGIN_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(tessera_add_plugin)
  cmake_parse_arguments(ARG "INSTALL" "NAME;KIND;OUTPUT_DIRECTORY" "SOURCES;LINK_LIBRARIES" ${ARGN})
  if(NOT ARG_NAME OR NOT ARG_KIND OR NOT ARG_SOURCES)
    message(FATAL_ERROR "tessera_add_plugin: NAME, KIND and SOURCES are required")
  endif()
  if(NOT ARG_KIND MATCHES "^(backend|strategy|compressor|selector|model)$")
    message(FATAL_ERROR "tessera_add_plugin(${ARG_NAME}): unknown KIND '${ARG_KIND}'")
  endif()
  if(NOT ARG_NAME MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "tessera_add_plugin: NAME '${ARG_NAME}' must match [a-z0-9_]+")
  endif()

  set(target tessera_${ARG_KIND}_${ARG_NAME})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE Tessera::sdk ${ARG_LINK_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "tessera_${ARG_KIND}_${ARG_NAME}"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  set(map "${_TESSERA_ADD_PLUGIN_DIR}/tessera_plugin.map")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${map}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${map}")
  # Sanitizer runtimes leave symbols for the executable to provide, so -z defs
  # is dropped when sanitizers come from the directory or the global flags.
  get_property(_san DIRECTORY PROPERTY COMPILE_OPTIONS)
  if(NOT "${_san} ${CMAKE_CXX_FLAGS} ${CMAKE_MODULE_LINKER_FLAGS}" MATCHES "-fsanitize")
    target_link_options(${target} PRIVATE "LINKER:-z,defs")
  endif()

  if(ARG_OUTPUT_DIRECTORY)
    set(out "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED TESSERA_ADD_PLUGIN_DEFAULT_OUTPUT_DIR)
    set(out "${TESSERA_ADD_PLUGIN_DEFAULT_OUTPUT_DIR}")
  else()
    set(out "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${out}")
  if(COMMAND tessera_target_warnings)
    tessera_target_warnings(${target})
  endif()

  if(ARG_INSTALL)
    if(DEFINED TESSERA_ADD_PLUGIN_INSTALL_DIR)
      set(dest "${TESSERA_ADD_PLUGIN_INSTALL_DIR}")
    else()
      set(dest "${CMAKE_INSTALL_LIBDIR}/tessera/plugins")
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION "${dest}")
  endif()
endfunction()
