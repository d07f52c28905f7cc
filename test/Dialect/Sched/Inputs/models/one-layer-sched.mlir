module attributes {train.layers = [#train.layer<"a", params = [@a]>]} {
  train.param @a : tensor<4xf32> at 0
  func.func @then_order(%x: tensor<4xf32>) -> tensor<4xf32> {
    %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%in: tensor<4xf32>):
      %y = sched.task fwd layer(0) (%in) : (tensor<4xf32>) -> tensor<4xf32> {
      ^bb0(%i: tensor<4xf32>):
        %a = train.param_value @a : tensor<4xf32>
        %m = train.mul %i, %a : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
        sched.yield %m : tensor<4xf32>
      }
      sched.task opt layer(0) (%in) : (tensor<4xf32>) -> () {
      ^bb0(%g: tensor<4xf32>):
        train.adamw @a, %g {lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0} : tensor<4xf32>
      }
      sched.yield %y : tensor<4xf32>
    }
    return %r : tensor<4xf32>
  }
}
