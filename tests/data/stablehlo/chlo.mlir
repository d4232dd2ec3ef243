// The chlo operations JAX leaves in that are one HLO instruction each
// (jax.scipy.special.erf, jnp.tan), written by hand from the CHLO op
// definitions (openxla/stablehlo stablehlo/dialect/ChloOps.td); chlo.hlo
// is the same program.
module @jit_chlo attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> tensor<8x4xf32> {
    %0 = chlo.erf %arg0 : tensor<8x4xf32> -> tensor<8x4xf32>
    %1 = chlo.tan %0 : tensor<8x4xf32> -> tensor<8x4xf32>
    return %1 : tensor<8x4xf32>
  }
}
