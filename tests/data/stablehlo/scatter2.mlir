// A scatter of two inputs (written by hand from the StableHLO spec,
// openxla/stablehlo docs/spec.md, "scatter", whose example scatters one
// input; the spec allows N): a running maximum and the id that set it,
// updated together at the rows' ids, as a segment argmax lowers; the
// region takes the two current values, then the two updates, and returns
// two values.
module @jit_segment_argmax attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<4x8xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"}, %arg1: tensor<4x1xi32>, %arg2: tensor<4x8xi32>) -> (tensor<6x8xf32>, tensor<6x8xi32>) {
    %cst = stablehlo.constant dense<0xFF800000> : tensor<6x8xf32>
    %c = stablehlo.constant dense<-1> : tensor<6x8xi32>
    %0:2 = "stablehlo.scatter"(%cst, %c, %arg1, %arg0, %arg2) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%v: tensor<f32>, %i: tensor<i32>, %u: tensor<f32>, %j: tensor<i32>):
      %1 = stablehlo.compare  GT, %u, %v,  FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %2 = stablehlo.select %1, %u, %v : tensor<i1>, tensor<f32>
      %3 = stablehlo.select %1, %j, %i : tensor<i1>, tensor<i32>
      stablehlo.return %2, %3 : tensor<f32>, tensor<i32>
    }) : (tensor<6x8xf32>, tensor<6x8xi32>, tensor<4x1xi32>, tensor<4x8xf32>, tensor<4x8xi32>) -> (tensor<6x8xf32>, tensor<6x8xi32>)
    return %0#0, %0#1 : tensor<6x8xf32>, tensor<6x8xi32>
  }
}
