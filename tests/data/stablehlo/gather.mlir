// An embedding lookup as jax.jit(f).lower(...).as_text() prints it
// (written by hand from the StableHLO spec, openxla/stablehlo docs/spec.md,
// "gather"): jnp.take(table, ids, axis=0) is a gather of one row per id,
// here in the properties form <{...}> recent JAX prints and in the
// attribute-dictionary form of the spec's example.
module @jit_embed attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<16x8xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"}, %arg1: tensor<4xi32>, %arg2: tensor<3x4x2xf32>, %arg3: tensor<2x2xi32>) -> (tensor<4x8xf32> {jax.result_info = ""}) {
    %0 = stablehlo.reshape %arg1 : (tensor<4xi32>) -> tensor<4x1xi32>
    %1 = "stablehlo.gather"(%arg0, %0) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<16x8xf32>, tensor<4x1xi32>) -> tensor<4x8xf32>
    %2 = "stablehlo.gather"(%arg2, %arg3) {
      dimension_numbers = #stablehlo.gather<
        offset_dims = [1],
        collapsed_slice_dims = [0, 1],
        start_index_map = [1, 0],
        index_vector_dim = 1>,
      slice_sizes = array<i64: 1, 1, 2>,
      indices_are_sorted = true
    } : (tensor<3x4x2xf32>, tensor<2x2xi32>) -> tensor<2x2xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.reduce(%2 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x2xf32>, tensor<f32>) -> tensor<f32>
    %4 = stablehlo.broadcast_in_dim %3, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
    %5 = stablehlo.add %1, %4 : tensor<4x8xf32>
    return %5 : tensor<4x8xf32>
  }
}
