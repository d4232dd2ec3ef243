// Functions returning several values, as jax.value_and_grad's step prints
// them (written by hand from the StableHLO spec, openxla/stablehlo
// docs/spec.md, "func.return"): a private function returning two values
// called as %0:2 = call, and @main returning two, one of them sharded.
module @jit_value_and_grad attributes {mhlo.num_partitions = 2 : i32} {
  func.func private @loss_and_scale(%arg0: tensor<8x4xf32>) -> (tensor<f32>, tensor<8x4xf32>) {
    %0 = stablehlo.multiply %arg0, %arg0 : tensor<8x4xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<f32>
    %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<8x4xf32>
    %2 = stablehlo.multiply %arg0, %cst_0 : tensor<8x4xf32>
    return %1, %2 : tensor<f32>, tensor<8x4xf32>
  }
  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> (tensor<f32> {jax.result_info = "[0]"}, tensor<8x4xf32> {jax.result_info = "[1]", mhlo.sharding = "{devices=[2,1]<=[2]}"}) {
    %0:2 = call @loss_and_scale(%arg0) : (tensor<8x4xf32>) -> (tensor<f32>, tensor<8x4xf32>)
    %1 = stablehlo.negate %0#1 : tensor<8x4xf32>
    return %0#0, %1 : tensor<f32>, tensor<8x4xf32>
  }
}
