// jnp.argmax's reduce of two operands (values and their indices), written
// by hand from the StableHLO spec (openxla/stablehlo docs/spec.md,
// stablehlo.reduce); argmax.hlo is the same program: a variadic reduce
// whose result is a tuple.
module @jit_argmax attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> tensor<8xi32> {
    %0 = stablehlo.iota dim = 1 : tensor<8x4xi32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %1:2 = stablehlo.reduce(%arg0 init: %cst), (%0 init: %c) across dimensions = [1] : (tensor<8x4xf32>, tensor<8x4xi32>, tensor<f32>, tensor<i32>) -> (tensor<8xf32>, tensor<8xi32>)
     reducer(%arg1: tensor<f32>, %arg3: tensor<f32>) (%arg2: tensor<i32>, %arg4: tensor<i32>)  {
      %2 = stablehlo.compare  GT, %arg1, %arg3,  FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %3 = stablehlo.select %2, %arg1, %arg3 : tensor<i1>, tensor<f32>
      %4 = stablehlo.select %2, %arg2, %arg4 : tensor<i1>, tensor<i32>
      stablehlo.return %3, %4 : tensor<f32>, tensor<i32>
    }
    return %1#1 : tensor<8xi32>
  }
}
