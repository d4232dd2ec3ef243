// jnp.argsort and jnp.sort as JAX prints them (written by hand from the
// StableHLO spec, openxla/stablehlo docs/spec.md, "sort"): keys sorted
// with their iota along rows, stable, in a total order; a descending sort
// of a column in the generic return form.
module @jit_argsort attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> (tensor<8x16xi32>, tensor<8x16xf32>) {
    %0 = stablehlo.iota dim = 1 : tensor<8x16xi32>
    %1:2 = "stablehlo.sort"(%arg0, %0) <{dimension = 1 : i64, is_stable = true}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>, %arg3: tensor<i32>, %arg4: tensor<i32>):
      %2 = stablehlo.compare  LT, %arg1, %arg2,  TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %2 : tensor<i1>
    }) : (tensor<8x16xf32>, tensor<8x16xi32>) -> (tensor<8x16xf32>, tensor<8x16xi32>)
    %3 = "stablehlo.sort"(%1#0) <{dimension = 0 : i64}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %4 = stablehlo.compare  GT, %a, %b,  FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      "stablehlo.return"(%4) : (tensor<i1>) -> ()
    }) : (tensor<8x16xf32>) -> tensor<8x16xf32>
    return %1#1, %3 : tensor<8x16xi32>, tensor<8x16xf32>
  }
}
