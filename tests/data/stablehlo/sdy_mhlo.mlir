// sdy.mlir's program with GSPMD shardings (mhlo.sharding) of the same
// meaning: tiled over the named axes in their order, replicated over the
// others (the tile assignment is the 2x4 mesh transposed to that order).
module @jit_sdy attributes {mhlo.num_partitions = 8 : i32} {
  func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"}, %arg1: tensor<16x32xf32> {mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, %arg2: tensor<32x8xf32> {mhlo.sharding = "{devices=[8,1]<=[2,4]T(1,0)}"}) -> (tensor<8x8xf32> {jax.result_info = "", mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = stablehlo.custom_call @Sharding(%0) {mhlo.sharding = "{devices=[2,4]<=[8]}"} : (tensor<8x32xf32>) -> tensor<8x32xf32>
    %2 = stablehlo.tanh %1 {mhlo.sharding = "{devices=[2,4]<=[8]}"} : tensor<8x32xf32>
    %3 = stablehlo.dot_general %2, %arg2, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x8xf32>) -> tensor<8x8xf32>
    return %3 : tensor<8x8xf32>
  }
}
