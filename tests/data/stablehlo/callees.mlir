// Functions in the order JAX prints them (main first, a callee after its
// caller), written by hand from the StableHLO spec; callees.hlo is the same
// program with each computation before its callers, as HLO wants.
module @jit_callees attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> tensor<8x4xf32> {
    %0 = call @outer(%arg0) : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = call @inner(%0) : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
  func.func private @outer(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %0 = call @inner(%arg0) : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.multiply %0, %arg0 : tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
  func.func private @inner(%arg0: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %0 = stablehlo.tanh %arg0 : tensor<8x4xf32>
    return %0 : tensor<8x4xf32>
  }
}
