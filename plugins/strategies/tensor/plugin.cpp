// Registration of the `tensor` strategy plugin.
#include "tensor_options.hpp"
#include "tensor_strategy.hpp"

TESSERA_REGISTER_STRATEGY(tessera::strategies::TensorStrategy, "tensor", "0.1.0",
                          "tensor parallel: split parameters sharded over a tensor group "
                          "(column/row pairs, classes-parallel head), data-parallel replicas",
                          tessera::strategies::kTensorOptions)
