// An embedding's gradient as JAX prints it (written by hand from the
// StableHLO spec, openxla/stablehlo docs/spec.md, "scatter"): the rows'
// gradients added into a zero table at their ids, in the properties form
// <{...}> recent JAX prints (pretty ops in the region) and in the spec's
// form (the dictionary after the region, generic ops inside).
module @jit_embed_grad attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<4xi32>, %arg1: tensor<4x8xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"}, %arg2: tensor<6xf32>, %arg3: tensor<2x1xi32>, %arg4: tensor<2xf32>) -> (tensor<16x8xf32> {jax.result_info = ""}) {
    %0 = stablehlo.reshape %arg0 : (tensor<4xi32>) -> tensor<4x1xi32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<16x8xf32>
    %1 = "stablehlo.scatter"(%cst, %0, %arg1) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%arg5: tensor<f32>, %arg6: tensor<f32>):
      %4 = stablehlo.add %arg5, %arg6 : tensor<f32>
      stablehlo.return %4 : tensor<f32>
    }) : (tensor<16x8xf32>, tensor<4x1xi32>, tensor<4x8xf32>) -> tensor<16x8xf32>
    %2 = "stablehlo.scatter"(%arg2, %arg3, %arg4) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %5 = stablehlo.maximum %a, %b : tensor<f32>
        "stablehlo.return"(%5) : (tensor<f32>) -> ()
    }) {
      scatter_dimension_numbers = #stablehlo.scatter<
        update_window_dims = [],
        inserted_window_dims = [0],
        scatter_dims_to_operand_dims = [0],
        index_vector_dim = 1>,
      indices_are_sorted = false,
      unique_indices = true
    } : (tensor<6xf32>, tensor<2x1xi32>, tensor<2xf32>) -> tensor<6xf32>
    %3 = stablehlo.slice %2 [0:1] : (tensor<6xf32>) -> tensor<1xf32>
    %6 = stablehlo.reshape %3 : (tensor<1xf32>) -> tensor<f32>
    %7 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %8 = stablehlo.multiply %1, %7 : tensor<16x8xf32>
    return %8 : tensor<16x8xf32>
  }
}
