// Reductions with a region body, as JAX prints them (jnp.max, and the
// generic form other tools print), written by hand from the StableHLO spec
// (openxla/stablehlo docs/spec.md); reduce_region.hlo is the same program.
module @jit_reduce_region attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> tensor<f32> {
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %cst) across dimensions = [1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<8xf32>
     reducer(%arg1: tensor<f32>, %arg2: tensor<f32>)  {
      %3 = stablehlo.maximum %arg1, %arg2 : tensor<f32>
      stablehlo.return %3 : tensor<f32>
    }
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %1 = "stablehlo.reduce"(%0, %cst_0) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      "stablehlo.return"(%s) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<8xf32>, tensor<f32>) -> tensor<f32>
    return %1 : tensor<f32>
  }
}
