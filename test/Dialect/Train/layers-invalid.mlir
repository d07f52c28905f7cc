// RUN: spillway-opt %s -split-input-file -verify-diagnostics
// The layer table's one check: #train.layer and #train.shared verify each
// entry, the train dialect the table as a whole (the passes that read it
// take it from here).

// expected-error @+1 {{invalid kind of attribute specified}}
module attributes {train.layers = [#train.layer<"a", params = ["a"]>]} {
}

// -----

// expected-error @+1 {{a #train.layer needs a name}}
module attributes {train.layers = [#train.layer<"", params = [@a]>]} {
}

// -----

// expected-error @+1 {{#train.layer<"a"> lists @a twice}}
module attributes {train.layers = [#train.layer<"a", params = [@a, @b, @a]>]} {
}

// -----

// expected-error @+1 {{#train.layer<"a"> shares @b, which it does not own}}
module attributes {train.layers = [#train.layer<"a", params = [@a], shared = [#train.shared<@b, used_by = [0], grad_from = [0]>]>]} {
}

// -----

// expected-error @+1 {{#train.layer<"a"> uses @a, which it owns}}
module attributes {train.layers = [#train.layer<"a", params = [@a], uses = [@a]>]} {
}

// -----

// expected-error @+1 {{expected 'shared' or 'uses' (each once), got 'weights'}}
module attributes {train.layers = [#train.layer<"a", params = [@a], weights = [@a]>]} {
}

// -----

// expected-error @+1 {{#train.shared<@a>: layer index -1 is negative}}
module attributes {train.layers = [#train.layer<"a", params = [@a], shared = [#train.shared<@a, used_by = [0, -1], grad_from = [0]>]>]} {
}

// -----

// expected-error @+1 {{train.layers must be an array of #train.layer, got 3 : i64}}
module attributes {train.layers = 3 : i64} {
}

// -----

// The dictionaries of old are not entries.
// expected-error @+1 {{train.layers[1] is not a #train.layer: {name = "b", params = [@b]}}}
module attributes {train.layers = [#train.layer<"a", params = [@a]>, {name = "b", params = [@b]}]} {
}

// -----

// expected-error @+1 {{train.layers: parameter @a is owned by two layers (0 and 1)}}
module attributes {train.layers = [#train.layer<"a", params = [@a]>, #train.layer<"b", params = [@b, @a]>]} {
}

// -----

// expected-error @+1 {{train.layers[0] ('a'): layer 2 of @a's sharing is not in the table (2 layers)}}
module attributes {train.layers = [#train.layer<"a", params = [@a], shared = [#train.shared<@a, used_by = [0, 1], grad_from = [0, 2]>]>, #train.layer<"b", params = [@b], uses = [@a]>]} {
}

// -----

module {
  // expected-error @+1 {{train.layers belongs on the module}}
  func.func @f() attributes {train.layers = []} {
    return
  }
}
