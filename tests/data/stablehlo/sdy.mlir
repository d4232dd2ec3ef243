// Shardy (sdy) shardings as JAX prints them with Shardy on, written by hand
// from the Shardy dialect's documentation (openxla/shardy); sdy_mhlo.mlir is
// the same program annotated with the GSPMD shardings of the same meaning.
module @jit_sdy attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]>
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}], replicated={"x"}>}, %arg2: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"y", "x"}, {?}]>}) -> (tensor<8x8xf32> {jax.result_info = "", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{"x"}, {"y"}]> : tensor<8x32xf32>
    %2 = stablehlo.tanh %1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"x"}, {"y"}p1]>]>} : tensor<8x32xf32>
    %3 = stablehlo.dot_general %2, %arg2, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x8xf32>) -> tensor<8x8xf32>
    return %3 : tensor<8x8xf32>
  }
}
