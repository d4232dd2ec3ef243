func.func @main(%a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32> {mhlo.sharding = "{replicated}" x}) {
  return %a, %a : tensor<2xf32>, tensor<2xf32>
}
