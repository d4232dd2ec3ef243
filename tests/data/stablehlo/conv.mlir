// A convolution layer as JAX prints it (written by hand from the StableHLO
// spec, openxla/stablehlo docs/spec.md, "convolution"): the pretty form
// jax.lax.conv_general_dilated lowers to (dim_numbers, window) and the
// generic form of the spec's example (window_strides, padding as a dense
// list, dilations, feature groups, precision_config).
module @jit_conv attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<2x8x8x4xf32> {mhlo.sharding = "{devices=[2,1,1,1]<=[2]}"}, %arg1: tensor<3x3x4x8xf32>, %arg2: tensor<3x3x2x8xf32>) -> (tensor<2x4x4x8xf32> {jax.result_info = ""}) {
    %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<2x8x8x4xf32>, tensor<3x3x4x8xf32>) -> tensor<2x8x8x8xf32>
    %1 = stablehlo.tanh %0 : tensor<2x8x8x8xf32>
    %2 = stablehlo.slice %1 [0:2, 0:8, 0:8, 0:4] : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x4xf32>
    %3 = "stablehlo.convolution"(%2, %arg2) {
      window_strides = array<i64: 2, 2>,
      padding = dense<[[0, 1], [0, 1]]> : tensor<2x2xi64>,
      lhs_dilation = array<i64: 1, 1>,
      rhs_dilation = array<i64: 1, 1>,
      window_reversal = array<i1: false, false>,
      dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
      batch_group_count = 1 : i64,
      feature_group_count = 2 : i64,
      precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision HIGHEST>]
    } : (tensor<2x8x8x4xf32>, tensor<3x3x2x8xf32>) -> tensor<2x4x4x8xf32>
    return %3 : tensor<2x4x4x8xf32>
  }
}
