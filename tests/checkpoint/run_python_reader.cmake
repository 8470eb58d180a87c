# Writes the sample checkpoint with the C++ writer, reads it back with the
# standard-library-only Python reader, and compares the printout with the
# expected one. Variables: SAMPLE (writer executable), PYTHON, SCRIPT,
# EXPECTED (file with the expected printout), WORK (scratch directory).
file(MAKE_DIRECTORY "${WORK}")
set(ckpt "${WORK}/sample.safetensors")
execute_process(COMMAND "${SAMPLE}" "${ckpt}" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "writing ${ckpt} failed (${rc}): ${err}")
endif()
execute_process(COMMAND "${PYTHON}" "${SCRIPT}" "${ckpt}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "python reader failed (${rc}): ${err}")
endif()
file(READ "${EXPECTED}" expected)
if(NOT out STREQUAL expected)
  message(FATAL_ERROR "python reader printed:\n${out}\nexpected:\n${expected}")
endif()
message(STATUS "python reader output matches:\n${out}")
