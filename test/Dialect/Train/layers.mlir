// RUN: spillway-opt %s | FileCheck %s
// RUN: spillway-opt %s | spillway-opt | FileCheck %s
// The layer table prints as it parses: a layer without parameters, a tied
// weight's owner (shared) and reader (uses).

// CHECK:      module attributes {train.layers = [
// CHECK-SAME:   #train.layer<"empty", params = []>,
// CHECK-SAME:   #train.layer<"wte", params = [@wte], shared = [#train.shared<@wte, used_by = [1, 2], grad_from = [2]>]>,
// CHECK-SAME:   #train.layer<"h.0", params = [@h.0.w, @h.0.b]>,
// CHECK-SAME:   #train.layer<"head", params = [@head.b], uses = [@wte]>]}
module attributes {train.layers = [
    #train.layer<"empty", params = []>,
    #train.layer<"wte", params = [@wte],
                 shared = [#train.shared<@wte, used_by = [1, 2], grad_from = [2]>]>,
    #train.layer<"h.0", params = [@h.0.w, @h.0.b]>,
    #train.layer<"head", params = [@head.b], uses = [@wte]>]} {
}
