// RUN: spillway-opt %s -split-input-file -verify-diagnostics

func.func @zero_microbatches() {
  // expected-error @+1 {{'sched.iteration' op needs at least one micro-batch, got 0}}
  sched.iteration() {microbatches = 0 : i64} : () -> () {
  }
  return
}

// -----

func.func @bad_order() {
  // expected-error @+1 {{order must be 'horizontal' or 'snake', got 'zigzag'}}
  sched.iteration() {order = "zigzag"} : () -> () {
  }
  return
}

// -----

func.func @iteration_yield(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sched.iteration(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{'sched.yield' op yields () but its parent sched.iteration returns ('tensor<4xf32>')}}
    sched.yield
  }
  return %r : tensor<4xf32>
}

// -----

func.func @task_outside_iteration() {
  // expected-error @+1 {{'sched.task' op expects parent op 'sched.iteration'}}
  sched.task fwd layer(0) () : () -> () {
  }
  return
}

// -----

func.func @task_args(%x: tensor<4xf32>) {
  sched.iteration(%x) : (tensor<4xf32>) -> () {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{'sched.task' op block arguments ('tensor<2xf32>') must match the operands ('tensor<4xf32>')}}
    sched.task fwd layer(0) (%a) : (tensor<4xf32>) -> () {
    ^bb0(%b: tensor<2xf32>):
    }
  }
  return
}

// -----

// Tasks are isolated from above: a value from outside must be an operand.
func.func @task_isolated(%x: tensor<4xf32>) {
  sched.iteration(%x) : (tensor<4xf32>) -> () {
  ^bb0(%a: tensor<4xf32>):
    // expected-note @+1 {{required by region isolation constraints}}
    sched.task fwd layer(0) () : () -> () {
      // expected-error @+1 {{using value defined outside the region}}
      %n = train.neg %a : tensor<4xf32>
    }
  }
  return
}

// -----

func.func @negative_layer() {
  sched.iteration() : () -> () {
    // expected-error @+1 {{attribute 'layer' failed to satisfy constraint}}
    sched.task fwd layer(-1) () : () -> () {
    }
  }
  return
}

// -----

func.func @opt_with_microbatch() {
  sched.iteration() {microbatches = 2 : i64} : () -> () {
    // expected-error @+1 {{an opt task runs once per iteration and takes no micro-batch index}}
    sched.task opt layer(0) mb(1) () : () -> () {
    }
  }
  return
}

// -----

func.func @missing_microbatch() {
  sched.iteration() {microbatches = 2 : i64} : () -> () {
    // expected-error @+1 {{a bwd task of an iteration with 2 micro-batches needs a micro-batch index}}
    sched.task bwd layer(0) () : () -> () {
    }
  }
  return
}

// -----

func.func @microbatch_range() {
  sched.iteration() {microbatches = 2 : i64} : () -> () {
    // expected-error @+1 {{micro-batch 2 is out of range: the iteration has 2 micro-batches}}
    sched.task fwd layer(0) mb(2) () : () -> () {
    }
  }
  return
}

// -----

func.func @slice_divides(%x: tensor<5x3xf32>) {
  sched.iteration(%x) : (tensor<5x3xf32>) -> () {
  ^bb0(%a: tensor<5x3xf32>):
    // expected-error @+1 {{leading dimension 5 does not divide into 2 micro-batches}}
    %s = sched.slice %a [0 of 2] : tensor<5x3xf32> -> tensor<2x3xf32>
  }
  return
}

// -----

func.func @slice_index(%x: tensor<4x3xf32>) {
  sched.iteration(%x) : (tensor<4x3xf32>) -> () {
  ^bb0(%a: tensor<4x3xf32>):
    // expected-error @+1 {{micro-batch 2 is out of range: the batch is split into 2}}
    %s = sched.slice %a [2 of 2] : tensor<4x3xf32> -> tensor<2x3xf32>
  }
  return
}

// -----

func.func @slice_type(%x: tensor<4x3xf32>) {
  sched.iteration(%x) : (tensor<4x3xf32>) -> () {
  ^bb0(%a: tensor<4x3xf32>):
    // expected-error @+1 {{result type 'tensor<2x2xf32>' must be 'tensor<2x3xf32>' (2 micro-batches of 'tensor<4x3xf32>')}}
    %s = sched.slice %a [1 of 2] : tensor<4x3xf32> -> tensor<2x2xf32>
  }
  return
}

// -----

func.func @slice_scalar(%x: tensor<f32>) {
  sched.iteration(%x) : (tensor<f32>) -> () {
  ^bb0(%a: tensor<f32>):
    // expected-error @+1 {{input must have a leading (batch) dimension}}
    %s = sched.slice %a [0 of 1] : tensor<f32> -> tensor<f32>
  }
  return
}

// -----

func.func @accumulate_ints(%x: tensor<4xi64>) {
  sched.iteration(%x) : (tensor<4xi64>) -> () {
  ^bb0(%a: tensor<4xi64>):
    // expected-error @+1 {{accumulates floating-point tensors only, got 'tensor<4xi64>'}}
    %s = sched.accumulate sum %a, %a : tensor<4xi64>
  }
  return
}

// -----

func.func @move_two_links() {
  // expected-error @+1 {{moves along one link (ssd <-> host <-> gpu), not ssd -> gpu}}
  %t = sched.move params layer(0) ssd -> gpu prio(demand) : !sched.timepoint
  return
}

// -----

func.func @move_same_tier() {
  // expected-error @+1 {{moves along one link (ssd <-> host <-> gpu), not host -> host}}
  %t = sched.move params layer(0) host -> host prio(demand) : !sched.timepoint
  return
}

// -----

func.func @stage_to_ssd() {
  // expected-error @+1 {{gradstage blocks are staging and never go to ssd}}
  %t = sched.move gradstage layer(0) host -> ssd prio(writeback) : !sched.timepoint
  return
}

// -----

func.func @pending_moves() {
  // expected-error @+1 {{pending blocks (deferred gradient slices) stay at home; they never move}}
  %t = sched.move pending layer(0) host -> gpu prio(demand) : !sched.timepoint
  return
}

// -----

func.func @await_nothing() {
  // expected-error @+1 {{'sched.await' op needs at least one timepoint}}
  "sched.await"() : () -> ()
  return
}

// -----

func.func @bind_gradients() {
  // expected-error @+1 {{binds params, optimizer or master blocks, not gradients}}
  sched.bind gradients layer(0) gpu
  return
}

// -----

func.func @alloc_optimizer() {
  // expected-error @+1 {{allocates copies of params blocks (rounded from their masters), not optimizer}}
  sched.alloc optimizer layer(0) host
  return
}

// -----

func.func @alloc_ssd() {
  // expected-error @+1 {{allocates a copy where compute writes it (gpu or host), not ssd}}
  sched.alloc params layer(0) ssd
  return
}

// -----

func.func @bind_ssd() {
  // expected-error @+1 {{compute cannot read a block on ssd; move it to host or gpu first}}
  sched.bind params layer(0) ssd
  return
}

// -----

func.func @grad_norms_ssd() {
  // expected-error @+1 {{reads the gradients on gpu or host; a copy on ssd must come to host first}}
  sched.grad_norms layer(0) ssd mean(1)
  return
}

// -----

func.func @clip_no_params() {
  // expected-error @+1 {{needs the updated parameters whose norms it sums}}
  %c = sched.clip_grad_norm [] {max_norm = 1.0 : f64} : tensor<f32>
  return
}

// -----

func.func @clip_zero() {
  // expected-error @+1 {{max_norm must be positive and at most 1e6, not 0}}
  %c = sched.clip_grad_norm [@w] {max_norm = 0.0 : f64} : tensor<f32>
  return
}

// -----

func.func @stage_partial(%g: tensor<4xf32>) {
  // expected-error @+1 {{has 3 gradients for 2 parameters; expected a whole number of micro-batches}}
  sched.stage_grads gradients layer(0) first(%g, %g, %g) {params = [@a, @b]} : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @stage_params(%g: tensor<4xf32>) {
  // expected-error @+1 {{stages into a gradients or gradstage block, not params}}
  sched.stage_grads params layer(0) first(%g) {params = [@a]} : tensor<4xf32>
  return
}

// -----

// An iteration is one training step: the body of a function.
// expected-error @+1 {{'sched.iteration' op expects parent op 'func.func'}}
sched.iteration() : () -> () {
}

// -----

func.func @repeated_task(%x: tensor<4xf32>) {
  sched.iteration(%x) {microbatches = 2 : i64} : (tensor<4xf32>) -> () {
  ^bb0(%a: tensor<4xf32>):
    sched.task fwd layer(0) mb(0) () : () -> () {
    }
    // expected-note @+1 {{the first is here}}
    sched.task fwd layer(0) mb(1) () : () -> () {
    }
    // expected-error @+1 {{'sched.task' op repeats fwd layer(0) mb(1)}}
    sched.task fwd layer(0) mb(1) () : () -> () {
    }
  }
  return
}

// -----

func.func @repeated_opt() {
  sched.iteration() : () -> () {
    // expected-note @+1 {{the first is here}}
    sched.task opt layer(3) () : () -> () {
    }
    // expected-error @+1 {{'sched.task' op repeats opt layer(3)}}
    sched.task opt layer(3) () : () -> () {
    }
  }
  return
}

// -----

func.func @missing_microbatch() {
  // expected-error @+1 {{'sched.iteration' op has 2 of the 3 micro-batches of bwd layer(1): each fwd/bwd layer runs every micro-batch}}
  sched.iteration() {microbatches = 3 : i64} : () -> () {
    sched.task bwd layer(1) mb(0) () : () -> () {
    }
    sched.task bwd layer(1) mb(2) () : () -> () {
    }
  }
  return
}

// -----

func.func @deferred_fwd() {
  sched.iteration() : () -> () {
    // expected-error @+1 {{'sched.task' op only an opt task can be deferred, not a fwd task}}
    sched.task fwd deferred layer(0) () : () -> () {
    }
  }
  return
}

// -----

func.func @deferred_reads(%x: tensor<4xf32>) {
  sched.iteration(%x) : (tensor<4xf32>) -> () {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{'sched.task' op a deferred opt task applies updates kept from the previous iteration: it takes no operands and returns nothing}}
    sched.task opt deferred layer(0) (%a) : (tensor<4xf32>) -> () {
    ^bb0(%g: tensor<4xf32>):
    }
  }
  return
}

// -----

func.func @deferred_twice() {
  sched.iteration() : () -> () {
    // The layer's opt task and its deferred one are two tasks...
    sched.task opt layer(2) () : () -> () {
    }
    // expected-note @+1 {{the first is here}}
    sched.task opt deferred layer(2) () : () -> () {
    }
    // ...but not two deferred ones.
    // expected-error @+1 {{'sched.task' op repeats opt deferred layer(2)}}
    sched.task opt deferred layer(2) () : () -> () {
    }
  }
  return
}

// -----

// A put frees its value: reading it afterwards would read freed memory.
func.func @read_after_put(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %r = sched.iteration(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    // expected-error @+1 {{'sched.put_activation' op frees its value, but sched.yield reads it later; read the sched.take_activation of index 0 instead}}
    sched.put_activation %a index(0) : tensor<2x4xf32>
    sched.yield %a : tensor<2x4xf32>
  }
  return %r : tensor<2x4xf32>
}

// -----

// The offload passes' iteration attributes.
func.func @placement_unknown_tier() {
  // expected-error @+2 {{expected ::spillway::sched::Tier to be one of: gpu, host, ssd}}
  // expected-error @+1 {{failed to parse Sched_PlacementAttr parameter 'params' which is to be a `::spillway::sched::Tier`}}
  sched.iteration() {placement = #sched.placement<params = nvme, optimizer = gpu, gradients = gpu, activations = gpu>} : () -> () {
  }
  return
}

// -----

// Every class has a home.
func.func @placement_missing_class() {
  // expected-error @+1 {{struct is missing required parameter: activations}}
  sched.iteration() {placement = #sched.placement<params = ssd, optimizer = gpu, gradients = gpu>} : () -> () {
  }
  return
}

// -----

func.func @optimizer_on_unplaced() {
  // expected-error @+1 {{'sched.iteration' op optimizer_on needs a placement}}
  sched.iteration() {optimizer_on = "gpu"} : () -> () {
  }
  return
}

// -----

func.func @optimizer_on_elsewhere() {
  // expected-error @+1 {{'sched.iteration' op optimizer_on must be 'cpu' for optimizer state homed on host, got 'gpu'}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = host, gradients = gpu, activations = gpu>, optimizer_on = "gpu"} : () -> () {
  }
  return
}

// -----

func.func @updated_unplaced() {
  // expected-error @+1 {{'sched.iteration' op updated needs a placement}}
  sched.iteration() {updated = [[@a]]} : () -> () {
  }
  return
}

// -----

func.func @updated_not_symbols() {
  // expected-error @+1 {{'sched.iteration' op attribute 'updated' failed to satisfy constraint: per layer, its updated parameters}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = gpu>, updated = [["a"]]} : () -> () {
  }
  return
}

// -----

func.func @deferred_without_updated() {
  // expected-error @+1 {{'sched.iteration' op deferred needs updated}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = gpu>, deferred = array<i64: 4>} : () -> () {
  }
  return
}

// -----

func.func @deferred_per_layer() {
  // expected-error @+1 {{'sched.iteration' op deferred lists 1 layers, updated 2}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = gpu>, updated = [[@a], [@b]], deferred = array<i64: 4>} : () -> () {
  }
  return
}

// -----

func.func @deferred_negative() {
  // expected-error @+1 {{'sched.iteration' op deferred: layer 1 defers a negative number of elements (-4)}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = gpu>, updated = [[@a], [@b]], deferred = array<i64: 4, -4>} : () -> () {
  }
  return
}

// -----

// A class split by layer lives on host and SSD.
func.func @placement_split_on_gpu() {
  // expected-error @+1 {{placement layers: optimizer tier 0 is not host (1) or ssd (2)}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = ssd, gradients = gpu, activations = gpu, layers = {optimizer = array<i32: 0, 2>}>} : () -> () {
  }
  return
}

// -----

// The class's tier is the slowest of its layers'.
func.func @placement_split_base() {
  // expected-error @+1 {{placement layers: params = host but its slowest layer is on ssd}}
  sched.iteration() {placement = #sched.placement<params = host, optimizer = gpu, gradients = gpu, activations = gpu, layers = {params = array<i32: 1, 2>}>} : () -> () {
  }
  return
}

// -----

// Only the tensor classes split by layer.
func.func @placement_split_unknown() {
  // expected-error @+1 {{placement layers: 'weights' is not a class that splits by layer (params, optimizer, gradients, master, activations)}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = ssd, layers = {weights = array<i32: 1, 2>}>} : () -> () {
  }
  return
}

// -----

// Activations split by layer: the class's tier is the slowest too.
func.func @placement_split_activations() {
  // expected-error @+1 {{placement layers: activations = host but its slowest layer is on ssd}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = gpu, gradients = gpu, activations = host, layers = {activations = array<i32: 0, 2>}>} : () -> () {
  }
  return
}

// -----

// Master weights split by layer need master weights.
func.func @placement_split_master() {
  // expected-error @+1 {{the placement splits master weights the iteration does not have}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = ssd, gradients = gpu, activations = gpu, layers = {master = array<i32: 1, 2>}>, optimizer_on = "cpu"} : () -> () {
  }
  return
}

// -----

// A cut block is homed on SSD, its first elements on host.
func.func @placement_cut_on_host() {
  // expected-error @+1 {{placement cuts: layer 1 of optimizer is homed on host; a cut block is homed on ssd, its first elements on host}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = ssd, gradients = gpu, activations = gpu, layers = {optimizer = array<i32: 2, 1>}, cuts = {optimizer = array<i64: 1, 1024>}>} : () -> () {
  }
  return
}

// -----

// Only params, optimizer and master blocks are cut.
func.func @placement_cut_gradients() {
  // expected-error @+1 {{placement cuts: 'gradients' is not a class whose blocks are cut (params, optimizer, master)}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = ssd, gradients = ssd, activations = gpu, cuts = {gradients = array<i64: 0, 1024>}>} : () -> () {
  }
  return
}

// -----

// Pairs of an ascending layer and a positive number of elements.
func.func @placement_cut_pairs() {
  // expected-error @+1 {{placement cuts: optimizer needs an array<i64> of (layer, elements) pairs}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = ssd, gradients = gpu, activations = gpu, cuts = {optimizer = array<i64: 0>}>} : () -> () {
  }
  return
}

// -----

func.func @placement_cut_order() {
  // expected-error @+1 {{placement cuts: optimizer (0, 1024) is not a layer (ascending) and a positive number of elements}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = ssd, gradients = gpu, activations = gpu, cuts = {optimizer = array<i64: 1, 1024, 0, 1024>}>} : () -> () {
  }
  return
}

// -----

// A layer's blocks split at one element.
func.func @placement_cut_two_elements() {
  // expected-error @+1 {{placement cuts: layer 0 cuts optimizer at 1024 elements and params at 2048 (a layer's blocks split at one element)}}
  sched.iteration() {placement = #sched.placement<params = ssd, optimizer = ssd, gradients = gpu, activations = gpu, cuts = {optimizer = array<i64: 0, 1024>, params = array<i64: 0, 2048>}>} : () -> () {
  }
  return
}

// -----

// Master weights cut need master weights homed on SSD.
func.func @placement_cut_master_missing() {
  // expected-error @+1 {{the placement splits master weights the iteration does not have (no `master`)}}
  sched.iteration() {placement = #sched.placement<params = gpu, optimizer = ssd, gradients = gpu, activations = gpu, cuts = {master = array<i64: 0, 1024>}>, optimizer_on = "cpu"} : () -> () {
  }
  return
}

// -----

func.func @placement_cut_master_host() {
  // expected-error @+1 {{the placement cuts layer 0 of master, homed on host; a cut block is homed on ssd, its first elements on host}}
  sched.iteration() {master = "host", placement = #sched.placement<params = gpu, optimizer = ssd, gradients = gpu, activations = gpu, cuts = {master = array<i64: 0, 1024>}>, optimizer_on = "cpu"} : () -> () {
  }
  return
}
