// Array-rearranging ops a JAX step uses (jnp.concatenate, x[1:5, ::2],
// jnp.pad, lax.dynamic_slice, lax.dynamic_update_slice), written by hand
// from the StableHLO spec (openxla/stablehlo docs/spec.md); slices.hlo is
// the same program in HLO text.
module @jit_slices attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<4x6xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}, %arg1: tensor<2x6xf32>, %arg2: tensor<i32>) -> tensor<6x6xf32> {
    %0 = stablehlo.concatenate %arg0, %arg1, dim = 0 : (tensor<4x6xf32>, tensor<2x6xf32>) -> tensor<6x6xf32>
    %1 = stablehlo.slice %0 [1:5, 0:6:2] : (tensor<6x6xf32>) -> tensor<4x3xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.pad %1, %cst, low = [0, 1], high = [2, 0], interior = [0, 1] : (tensor<4x3xf32>, tensor<f32>) -> tensor<6x6xf32>
    %c = stablehlo.constant dense<1> : tensor<i32>
    %3 = stablehlo.dynamic_slice %2, %arg2, %c, sizes = [2, 4] : (tensor<6x6xf32>, tensor<i32>, tensor<i32>) -> tensor<2x4xf32>
    %4 = stablehlo.negate %3 : tensor<2x4xf32>
    %5 = stablehlo.dynamic_update_slice %2, %4, %c, %arg2 : (tensor<6x6xf32>, tensor<2x4xf32>, tensor<i32>, tensor<i32>) -> tensor<6x6xf32>
    return %5 : tensor<6x6xf32>
  }
}
