// y = x stored as bf16 and read back: what bf16 storage does to a value.
module {
  func.func @main(%x: tensor<4096xf32> {train.name = "x"}) -> (tensor<4096xf32> {train.name = "y"}) attributes {train.forward_only} {
    %b = train.cast %x : tensor<4096xf32> -> tensor<4096xbf16>
    %y = train.cast %b : tensor<4096xbf16> -> tensor<4096xf32>
    return %y : tensor<4096xf32>
  }
}
