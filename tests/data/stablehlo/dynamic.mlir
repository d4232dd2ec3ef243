// A bounded dynamic dimension as JAX prints it for a padded batch (written
// by hand from the StableHLO spec, openxla/stablehlo docs/spec.md:
// tensor<?x4xf32, #stablehlo.bounds<8, ?>> is a dim of at most 8, HLO's
// f32[<=8,4]), set and read with set_dimension_size/get_dimension_size, and
// a function returning both. Simulated, not interpreted (doc/hlo.md).
module @jit_padded_batch {
  func.func public @main(%arg0: tensor<8x4xf32>, %arg1: tensor<i32>) -> (tensor<?x4xf32, #stablehlo.bounds<8, ?>>, tensor<i32>) {
    %0 = stablehlo.set_dimension_size %arg0, %arg1, dim = 0 : (tensor<8x4xf32>, tensor<i32>) -> tensor<?x4xf32, #stablehlo.bounds<8, ?>>
    %1 = stablehlo.get_dimension_size %0, dim = 0 : (tensor<?x4xf32, #stablehlo.bounds<8, ?>>) -> tensor<i32>
    return %0, %1 : tensor<?x4xf32, #stablehlo.bounds<8, ?>>, tensor<i32>
  }
}
