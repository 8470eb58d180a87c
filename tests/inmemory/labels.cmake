# Read by ctest after the tests of tessera_inmemory_tests were discovered:
# gives each of them the labels "unit" and "inmemory".
if(tessera_inmemory_tests_TESTS)
  set_tests_properties(${tessera_inmemory_tests_TESTS} PROPERTIES LABELS "unit;inmemory")
endif()
