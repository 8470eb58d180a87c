# The CUDA language for the project's kernels (the host's element-wise
# kernels in core/, the models' CUDA units): enabled when nvcc is found
# (CMAKE_CUDA_COMPILER, CUDACXX, or /usr/local/cuda/bin/nvcc). Sets
# TESSERA_CUDA_LANGUAGE. CMAKE_CUDA_ARCHITECTURES defaults to Ampere and
# Hopper machine code plus PTX that newer GPUs compile.
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
set(TESSERA_CUDA_LANGUAGE OFF)
if(CMAKE_CUDA_COMPILER)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  enable_language(CUDA)
  set(TESSERA_CUDA_LANGUAGE ON)
endif()
