// A two-layer MLP's forward and loss as jax.jit(f).lower(...).as_text()
// prints it (written by hand from the StableHLO spec, docs/spec.md of
// openxla/stablehlo): arguments sharded with mhlo.sharding, a
// with_sharding_constraint (custom_call @Sharding), a private function
// called from main, a reduce in its applies form, locations.
module @jit_mlp_loss attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func private @relu(%arg0: tensor<8x32xf32>) -> tensor<8x32xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<8x32xf32>
    return %1 : tensor<8x32xf32>
  }
  func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}, %arg1: tensor<16x32xf32> {mhlo.sharding = "{replicated}"}, %arg2: tensor<32x4xf32>, %arg3: tensor<8x4xf32>) -> (tensor<f32> {jax.result_info = "", mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32> loc(#loc3)
    %1 = call @relu(%0) : (tensor<8x32xf32>) -> tensor<8x32xf32>
    %2 = stablehlo.custom_call @Sharding(%1) {backend_config = "", mhlo.sharding = "{devices=[2,1]<=[2]}"} : (tensor<8x32xf32>) -> tensor<8x32xf32>
    %3 = stablehlo.dot_general %2, %arg2, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x4xf32>) -> tensor<8x4xf32>
    %4 = stablehlo.subtract %3, %arg3 : tensor<8x4xf32>
    %5 = stablehlo.multiply %4, %4 : tensor<8x4xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %6 = stablehlo.reduce(%5 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<f32>
    %cst_0 = stablehlo.constant dense<3.125000e-02> : tensor<f32>
    %7 = stablehlo.multiply %6, %cst_0 : tensor<f32>
    %8 = stablehlo.tanh %7 : tensor<f32>
    %9 = stablehlo.compare  GT, %8, %cst,  FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %10 = stablehlo.select %9, %7, %cst : tensor<i1>, tensor<f32>
    return %10 : tensor<f32>
  }
}
#loc3 = loc("jit(mlp_loss)/dot_general"(#loc1))
