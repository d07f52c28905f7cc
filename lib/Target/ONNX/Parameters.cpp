//===- Parameters.cpp - Which float initializers are parameters -----------===//
//
// A training graph's float initializers are not all parameters, and an
// exporter's optimizer leaves parameters in shapes torch never had. Before
// anything is imported, this file decides, from the exporter's own metadata
// where it exists, which initializer is which parameter, and undoes what
// changes the trained function:
//
//   - torch.onnx's dynamo exporter records the ExportedProgram's graph
//     signature (every parameter's placeholder and state-dict name), marks
//     each surviving parameter's value_info with InputSpec.kind PARAMETER /
//     BUFFER, each constant onnxscript's optimizer folded with the values it
//     was folded_from, and each node with the FX node it came from (whose
//     arguments name the parameters the torch op consumed).
//   - Initializers with equal values are merged by both exporters: HF's
//     ones / zeros norm weights and biases become one tensor shared by every
//     layer. A node whose FX node consumed parameter Y but reads the merged
//     initializer of X gets its own copy, named Y: the graph trains the
//     model torch trains, not a tied one. True ties (GPT-2's wte / lm_head)
//     are one placeholder in torch.export and stay one parameter.
//   - A constant folded from exactly one parameter P (the transposed weight
//     of every nn.Linear; GPT-2's position embedding gathered at arange(S))
//     trains as P would: AdamW is elementwise and such folds only move
//     elements. If P is still in the graph too (a tied embedding and head),
//     the fold must be recomputed from P, or the tie would break: a
//     transpose of P is, anything else is refused with the fix.
//   - A parameter the optimizer dropped because it was zero (Gemm's bias
//     C) comes back as a zero parameter of its name.
//   - An op the optimizer merged into an identical one (two modules with
//     equal initial weights applied to one input: GPT-NeoX's parallel
//     LayerNorms) comes back as a copy reading its own parameters, for the
//     readers whose FX arguments name the merged op's value.
//
// A file written by `spillway.export` (python/) says itself which
// initializer is which state-dict entry (model metadata
// `spillway.parameters`); that is authoritative and none of the above runs.
// TorchScript exports get their own recovery (recoverTorchScriptParameters).
// Without any metadata (hand-written graphs) every float initializer is a
// parameter unless --constant-initializers names it.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Regex.h"

#include <google/protobuf/unknown_field_set.h>

#include <cstring>
#include <map>

using namespace spillway;
using namespace spillway::onnx_import;

namespace {

constexpr StringLiteral kSignatureKey =
    "pkg.torch.export.ExportedProgram.graph_signature";
constexpr StringLiteral kKindKey = "pkg.torch.export.graph_signature.InputSpec.kind";
constexpr StringLiteral kOriginalNameKey = "pkg.torch.onnx.original_node_name";
constexpr StringLiteral kFoldedFromKey = "pkg.onnxscript.optimizer.folded_from";
constexpr StringLiteral kFxNodeKey = "pkg.torch.onnx.fx_node";
constexpr StringLiteral kNameScopesKey = "pkg.torch.onnx.name_scopes";
constexpr StringLiteral kClassesKey = "pkg.torch.onnx.class_hierarchy";

// Field numbers of `metadata_props` (onnx >= 1.16, IR 10): Debian's libonnx
// (1.12) does not know them, so protobuf keeps them as unknown fields.
constexpr int kGraphMetadataField = 16;
constexpr int kNodeMetadataField = 9;
constexpr int kValueInfoMetadataField = 4;

using Metadata = llvm::StringMap<std::string>;

/// The `metadata_props` entries of `msg`, read from its unknown fields.
Metadata metadataOf(const google::protobuf::Message &msg, int field) {
  Metadata out;
  const google::protobuf::UnknownFieldSet &unknown =
      msg.GetReflection()->GetUnknownFields(msg);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField &f = unknown.field(i);
    if (f.number() != field ||
        f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnxpb::StringStringEntryProto entry;
    if (entry.ParseFromString(f.length_delimited()))
      out[entry.key()] = entry.value();
  }
  return out;
}

StringRef lookup(const Metadata &m, StringRef key) {
  auto it = m.find(key);
  return it == m.end() ? StringRef() : StringRef(it->second);
}

/// The strings of a Python list repr: "['a', 'b.c']" -> {a, b.c}.
SmallVector<std::string> parsePyStrings(StringRef s) {
  SmallVector<std::string> out;
  while (true) {
    size_t open = s.find('\'');
    if (open == StringRef::npos)
      break;
    size_t close = s.find('\'', open + 1);
    if (close == StringRef::npos)
      break;
    out.push_back(s.substr(open + 1, close - open - 1).str());
    s = s.substr(close + 1);
  }
  return out;
}

/// The placeholders (`%p_...`) an FX node's text names.
SmallVector<std::string> fxPlaceholders(StringRef fx) {
  SmallVector<std::string> out;
  size_t start = fx.find("args = ");
  if (start == StringRef::npos)
    return out;
  fx = fx.substr(start);
  for (size_t i = fx.find('%'); i != StringRef::npos; i = fx.find('%', i + 1)) {
    size_t j = i + 1;
    while (j < fx.size() && (llvm::isAlnum(fx[j]) || fx[j] == '_'))
      ++j;
    if (j > i + 1)
      out.push_back(fx.substr(i + 1, j - i - 1).str());
  }
  return out;
}

/// The torch op an FX node calls: "torch.ops.aten.addmm.default" -> "addmm".
std::string fxTarget(StringRef fx) {
  size_t t = fx.find("target=torch.ops.aten.");
  if (t == StringRef::npos)
    return "";
  StringRef rest = fx.substr(t + strlen("target=torch.ops.aten."));
  return rest.take_while([](char c) { return c != '.' && c != ']'; }).str();
}

StringRef leafName(StringRef target) { return target.rsplit('.').second; }

} // namespace

/// The model metadata `spillway.parameters` (python/spillway/export.py,
/// format 1): {"wrapper_prefix": P, "parameters": {INIT: {"state_dict": NAME,
/// "shape": [..]}}, "ties": [[NAME, ALIAS, ..]], "buffers": [INIT, ..]}, the
/// names in "ties" and "state_dict" being the model's own (INIT without P).
/// Float initializers it does not list as parameters are constants.
LogicalResult Importer::readSpillwayParameters(const onnxpb::GraphProto &graph,
                                               StringRef text) {
  auto bad = [&](const Twine &why) {
    return error() << "model metadata 'spillway.parameters' " << why
                   << "; the file was changed after `spillway.export` wrote "
                      "it: export it again";
  };
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return bad("is not JSON (" + llvm::toString(parsed.takeError()) + ")");
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return bad("is not a JSON object");
  std::optional<int64_t> format = root->getInteger("format");
  if (format != 1)
    return error() << "model metadata 'spillway.parameters' has format "
                   << (format ? std::to_string(*format) : "(none)")
                   << "; this spillwayc reads format 1: use the spillwayc "
                      "of the spillway package that exported it";
  StringRef prefix = root->getString("wrapper_prefix").value_or("");
  const llvm::json::Object *params = root->getObject("parameters");
  if (!params)
    return bad("has no \"parameters\" object");

  llvm::StringMap<const onnxpb::TensorProto *> inits;
  for (const auto &t : graph.initializer())
    inits[t.name()] = &t;
  for (const auto &kv : *params) {
    StringRef name = kv.first;
    auto it = inits.find(name);
    if (it == inits.end())
      return bad("names parameter '" + name + "', which is no initializer");
    const onnxpb::TensorProto &t = *it->second;
    const llvm::json::Object *entry = kv.second.getAsObject();
    const llvm::json::Array *shape = entry ? entry->getArray("shape") : nullptr;
    std::optional<StringRef> sd =
        entry ? entry->getString("state_dict") : std::nullopt;
    if (!shape || !sd)
      return bad("entry '" + name + "' lacks \"state_dict\" or \"shape\"");
    SmallVector<int64_t> dims;
    for (const llvm::json::Value &d : *shape)
      dims.push_back(d.getAsInteger().value_or(-1));
    if (t.data_type() != onnxpb::TensorProto::FLOAT ||
        ArrayRef<int64_t>(dims) != ArrayRef<int64_t>(t.dims().data(),
                                                      t.dims_size()))
      return bad("gives parameter '" + name + "' shape " + shapeStr(dims) +
                 " of float32, but the initializer is " +
                 shapeStr(ArrayRef<int64_t>(t.dims().data(), t.dims_size())) +
                 " of " + dtypeName(t.data_type()));
    if (*sd != (name.starts_with(prefix) ? name.drop_front(prefix.size())
                                         : name))
      return bad("names parameter '" + name + "' '" + *sd +
                 "' in the state_dict, which is not it without the "
                 "wrapper prefix '" + prefix + "'");
  }
  for (const auto &t : graph.initializer())
    if (t.data_type() == onnxpb::TensorProto::FLOAT && !params->get(t.name()))
      constantInitializers.insert(t.name());
  stateDictPrefix = prefix.str();
  if (const llvm::json::Array *ties = root->getArray("ties"))
    for (const llvm::json::Value &tie : *ties) {
      const llvm::json::Array *names = tie.getAsArray();
      if (!names || names->size() < 2)
        return bad("has a tie that is not a list of two names or more");
      SmallVector<std::string> full;
      for (const llvm::json::Value &n : *names) {
        std::optional<StringRef> s = n.getAsString();
        if (!s)
          return bad("has a tie with a name that is not a string");
        full.push_back((prefix + *s).str());
      }
      if (!params->get(full.front()))
        return bad("ties '" + full.front() + "', which is no parameter");
      for (const std::string &alias : ArrayRef(full).drop_front())
        tiedAliases[full.front()].push_back(alias);
      paramOrigin[full.front()] =
          "tied: also '" +
          llvm::join(ArrayRef(full).drop_front(), "', '") + "'";
    }
  return success();
}

LogicalResult Importer::recoverParameters(onnxpb::ModelProto &model) {
  onnxpb::GraphProto &graph = *model.mutable_graph();
  for (const auto &p : model.metadata_props())
    if (p.key() == "spillway.parameters")
      return readSpillwayParameters(graph, p.value());
  Metadata graphMeta = metadataOf(graph, kGraphMetadataField);
  StringRef signature = lookup(graphMeta, kSignatureKey);
  if (signature.empty())
    return model.producer_name() == "pytorch"
               ? recoverTorchScriptParameters(graph)
               : success(); // not torch's: every float initializer trains

  // The graph signature: placeholder -> (kind, state-dict name).
  struct Placeholder {
    std::string kind, target;
  };
  llvm::StringMap<Placeholder> placeholders;
  llvm::StringMap<std::string> placeholderOfTarget; // PARAMETER targets only
  static const llvm::Regex line("^([A-Za-z0-9_]+): ([A-Z_]+) target='([^']*)'");
  SmallVector<StringRef> lines;
  signature.split(lines, '\n');
  for (StringRef l : lines) {
    SmallVector<StringRef, 4> m;
    if (!line.match(l.trim(), &m))
      continue;
    placeholders[m[1]] = {m[2].str(), m[3].str()};
    if (m[2] == "PARAMETER")
      placeholderOfTarget[m[3]] = m[1].str();
  }

  // Each value's metadata, by name; split copies get their own entries.
  llvm::StringMap<Metadata> info;
  for (const auto &vi : graph.value_info()) {
    Metadata m = metadataOf(vi, kValueInfoMetadataField);
    if (!m.empty())
      info[vi.name()] = std::move(m);
  }
  auto metaOf = [&](StringRef name, StringRef key) -> StringRef {
    auto it = info.find(name);
    return it == info.end() ? StringRef() : lookup(it->second, key);
  };

  // Which initializer holds which parameter (by placeholder), and what each
  // float initializer is.
  llvm::StringMap<std::string> initOfPlaceholder; // placeholder -> initializer
  llvm::StringMap<int> initIndex;
  for (auto [i, t] : llvm::enumerate(graph.initializer()))
    initIndex[t.name()] = i;
  // A wrapper around an HF model (forward(ids, labels) -> loss): the scope
  // of the outermost transformers module is the prefix its state_dict lacks.
  for (const onnxpb::NodeProto &node : graph.node()) {
    Metadata m = metadataOf(node, kNodeMetadataField);
    SmallVector<std::string> classes = parsePyStrings(lookup(m, kClassesKey));
    SmallVector<std::string> scopes = parsePyStrings(lookup(m, kNameScopesKey));
    for (size_t i = 0; i < classes.size() && i < scopes.size(); ++i)
      if (StringRef(classes[i]).starts_with("transformers.")) {
        if (i == 0)
          break; // the HF model itself was exported: no wrapper
        std::string prefix = scopes[i] + ".";
        if (llvm::all_of(placeholderOfTarget, [&](const auto &kv) {
              return kv.getKey().starts_with(prefix);
            }))
          stateDictPrefix = prefix;
        break;
      }
    if (!classes.empty())
      break;
  }
  // Folded constants that train as the one parameter they came from, and the
  // constant ones: by initializer name.
  llvm::StringMap<std::string> viewOf; // initializer -> source target
  // Folds to restore whole from --exported-state-dict: (fold, source).
  SmallVector<std::pair<std::string, std::string>> unfolds;
  // Ties to recompute: folded initializer -> source initializer.
  SmallVector<std::pair<std::string, std::string>> transposes;
  for (const auto &t : graph.initializer()) {
    if (t.data_type() != onnxpb::TensorProto::FLOAT)
      continue;
    StringRef name = t.name();
    StringRef kind = metaOf(name, kKindKey);
    if (kind == "PARAMETER") {
      StringRef orig = metaOf(name, kOriginalNameKey);
      if (!orig.empty())
        initOfPlaceholder[orig] = name.str();
      continue;
    }
    StringRef folded = metaOf(name, kFoldedFromKey);
    SmallVector<std::string> sources;
    for (std::string &s : parsePyStrings(folded))
      if (placeholderOfTarget.count(s))
        sources.push_back(s);
    if (sources.empty()) {
      // A buffer, a lifted constant, or one the optimizer folded from
      // constants alone (masks, RoPE tables, scales, exponents).
      constantInitializers.insert(name);
      continue;
    }
    if (sources.size() > 1)
      return error() << "initializer '" << name
                     << "' was folded by the exporter's optimizer from several "
                        "parameters ("
                     << llvm::join(sources, ", ")
                     << "); training it would not train them. Re-export with "
                        "torch.onnx.export(..., dynamo=True, optimize=False), "
                        "or with `python -m spillway.export`";
    viewOf[name] = sources.front();
  }
  // A fold read by the ops of several modules was merged with the equal
  // folds of other parameters (Gemma's 1 + weight of every RMSNorm): which
  // module's parameter each read stands for, and how it was folded, is lost.
  if (!viewOf.empty()) {
    llvm::StringMap<llvm::SetVector<StringRef>> scopesOf;
    std::deque<std::string> modules; // what scopesOf points into
    for (const onnxpb::NodeProto &node : graph.node()) {
      Metadata nodeMeta = metadataOf(node, kNodeMetadataField);
      SmallVector<std::string> scopes =
          parsePyStrings(lookup(nodeMeta, kNameScopesKey));
      modules.push_back(scopes.size() >= 2 ? scopes[scopes.size() - 2] : "");
      for (const std::string &in : node.input())
        if (viewOf.count(in))
          scopesOf[in].insert(modules.back());
    }
    for (const auto &t : graph.initializer()) {
      auto it = scopesOf.find(t.name());
      if (it == scopesOf.end() || it->second.size() < 2)
        continue;
      return error() << "initializer '" << t.name()
                     << "' was folded by the exporter's optimizer from "
                        "parameter '"
                     << viewOf[t.name()] << "' and is read by "
                     << it->second.size() << " modules ('"
                     << it->second[0] << "', '" << it->second[1]
                     << "', ...): the exporter merged equal folds of several "
                        "parameters, which cannot be told apart. Re-export "
                        "with torch.onnx.export(..., dynamo=True, "
                        "optimize=False), or with `python -m spillway.export`";
    }
  }
  // Folds read only as the B of MatMuls exported from aten.linear, 2-D:
  // nn.Linear weights the optimizer transposed.
  llvm::StringSet<> linearWeightViews;
  {
    llvm::StringMap<bool> onlyLinear;
    for (const onnxpb::NodeProto &node : graph.node())
      for (auto [k, in] : llvm::enumerate(node.input())) {
        if (!viewOf.count(in))
          continue;
        bool linear = node.op_type() == "MatMul" && k == 1 &&
                      fxTarget(lookup(metadataOf(node, kNodeMetadataField),
                                      kFxNodeKey)) == "linear";
        auto [it, fresh] = onlyLinear.try_emplace(in, linear);
        if (!fresh)
          it->second = it->second && linear;
      }
    for (auto &kv : onlyLinear)
      if (kv.getValue() &&
          graph.initializer(initIndex[kv.getKey()]).dims_size() == 2)
        linearWeightViews.insert(kv.getKey());
  }
  // A fold whose source parameter is still in the graph: recompute it from
  // the source, so both uses stay one parameter.
  for (auto &entry : viewOf) {
    StringRef name = entry.getKey();
    const std::string &source = entry.getValue();
    auto srcIt = initIndex.find(source);
    if (srcIt == initIndex.end()) {
      // The source is gone: this is its only copy. The transposed weight of
      // an nn.Linear (read only as MatMul's B by aten.linear) becomes the
      // weight again, in torch's layout, read through a Transpose as the
      // unoptimized export reads it: the linear fuses the same and --save
      // writes what torch's state_dict holds.
      if (linearWeightViews.contains(name)) {
        onnxpb::TensorProto &t = *graph.mutable_initializer(initIndex[name]);
        t.set_name(source);
        initIndex[source] = initIndex[name];
        transposedStorage.insert(source);
        transposes.emplace_back(name.str(), source);
        paramOrigin[source] = "stored transposed as '" + name.str() +
                              "' by the exporter's optimizer; trained in "
                              "torch's layout";
        continue;
      }
      // Some rows of the source (GPT-2's position table at arange(S)):
      // restored whole from the exported state_dict when there is one.
      if (opts.exportedStateDict) {
        unfolds.emplace_back(name.str(), source);
        continue;
      }
      paramOrigin[name] = "parameter '" + source +
                          "' as the exporter's optimizer folded it; trains "
                          "as that parameter";
      foldSources[name] = source;
      continue;
    }
    const onnxpb::TensorProto &src = graph.initializer(srcIt->second);
    const onnxpb::TensorProto &dst = graph.initializer(initIndex[name]);
    FailureOr<bool> transposed = isTransposeOf(dst, src);
    if (failed(transposed))
      return failure();
    if (!*transposed)
      return error() << "initializer '" << name
                     << "' was folded by the exporter's optimizer from "
                        "parameter '"
                     << source
                     << "', which the graph also uses itself; training both "
                        "would untie them. Re-export with "
                        "torch.onnx.export(..., dynamo=True, optimize=False), "
                        "or with `python -m spillway.export`";
    transposes.emplace_back(name.str(), source);
    paramOrigin[source] = "also read transposed as '" + name.str() +
                          "' (the exporter's optimizer had folded a copy; it "
                          "is computed from this parameter again)";
  }

  // Nodes that read a merged initializer on behalf of another parameter, and
  // Gemms whose zero bias the optimizer dropped.
  llvm::StringMap<std::string> splitInit; // new initializer name -> source
  llvm::StringSet<> referenced;           // placeholders an ONNX value holds
  for (auto &kv : initOfPlaceholder)
    referenced.insert(kv.getKey());
  for (auto &entry : viewOf)
    referenced.insert(placeholderOfTarget[entry.getValue()]);
  llvm::StringSet<> restored;
  for (onnxpb::NodeProto &node : *graph.mutable_node()) {
    Metadata nodeMeta = metadataOf(node, kNodeMetadataField);
    StringRef fx = lookup(nodeMeta, kFxNodeKey);
    if (fx.empty())
      continue;
    SmallVector<std::string> used = fxPlaceholders(fx);
    llvm::erase_if(used, [&](const std::string &p) {
      auto it = placeholders.find(p);
      return it == placeholders.end() || it->second.kind != "PARAMETER";
    });
    if (used.empty())
      continue;
    llvm::StringSet<> claimed;
    for (int k = 0; k < node.input_size(); ++k) {
      StringRef in = node.input(k);
      StringRef orig = metaOf(in, kOriginalNameKey);
      if (orig.empty() || metaOf(in, kKindKey) != "PARAMETER")
        continue;
      if (llvm::is_contained(used, orig)) {
        claimed.insert(orig);
        continue;
      }
      // The node's torch op consumed other parameters: the one of this
      // initializer's kind (weight, bias) that no initializer holds is the
      // one this input stands for.
      StringRef leaf = leafName(placeholders[orig].target);
      SmallVector<StringRef> candidates;
      for (const std::string &p : used)
        if (!initOfPlaceholder.count(p) && !claimed.contains(p) &&
            leafName(placeholders[p].target) == leaf)
          candidates.push_back(p);
      if (candidates.size() != 1)
        return error() << "node '" << nodeName(node) << "' reads parameter '"
                       << in << "', but the torch op it was exported from ("
                       << fxTarget(fx)
                       << ") consumed other parameters; the exporter merged "
                          "equal initializers and Spillway cannot tell which "
                          "one this is. Re-export with `python -m "
                          "spillway.export`";
      std::string p = candidates.front().str();
      claimed.insert(p);
      referenced.insert(p);
      std::string target = placeholders[p].target;
      if (!splitInit.count(target)) {
        splitInit[target] = in.str();
        onnxpb::TensorProto copy = graph.initializer(initIndex[in]);
        copy.set_name(target);
        *graph.add_initializer() = std::move(copy);
        initIndex[target] = graph.initializer_size() - 1;
        Metadata m = info[in];
        m[kOriginalNameKey] = p;
        info[target] = std::move(m);
      }
      paramOrigin[target] = "split from '" + in.str() +
                            "' (the exporter merged initializers of equal "
                            "value)";
      node.set_input(k, target);
    }
    // aten.addmm(bias, x, weight) exported as a Gemm without C: its bias was
    // zero and the optimizer removed it; the parameter is still trained.
    if (node.op_type() == "Gemm" && node.input_size() == 2 &&
        fxTarget(fx) == "addmm") {
      SmallVector<std::string> args = fxPlaceholders(fx);
      if (args.empty())
        continue;
      StringRef bias = args.front();
      auto ph = placeholders.find(bias);
      if (ph == placeholders.end() || ph->second.kind != "PARAMETER" ||
          initOfPlaceholder.count(bias) || referenced.contains(bias))
        continue;
      // Its length is the Gemm's N: B's columns (rows when transB).
      StringRef b = node.input(1);
      auto bi = initIndex.find(b);
      if (bi == initIndex.end())
        continue;
      const onnxpb::TensorProto &w = graph.initializer(bi->second);
      if (w.dims_size() != 2)
        continue;
      int64_t n = intAttr(node, "transB", 0) ? w.dims(0) : w.dims(1);
      std::string target = ph->second.target;
      onnxpb::TensorProto zero;
      zero.set_name(target);
      zero.set_data_type(onnxpb::TensorProto::FLOAT);
      zero.add_dims(n);
      zero.set_raw_data(std::string(size_t(n) * 4, '\0'));
      *graph.add_initializer() = std::move(zero);
      initIndex[target] = graph.initializer_size() - 1;
      node.add_input(target);
      referenced.insert(bias);
      restored.insert(target);
      paramOrigin[target] = "restored: zero, removed from its Gemm by the "
                            "exporter's optimizer";
    }
  }

  // Tied parameters: torch.export keeps one placeholder of a tie and leaves
  // the other unused; a node run in the unused one's module that reads a
  // parameter of the same attribute name reads its tie (GPT-2's wte lookup
  // reads lm_head.weight). --save writes the value under both names, as
  // state_dict() has them.
  llvm::StringSet<> consumed;
  SmallVector<std::string> unread;
  for (const onnxpb::NodeProto &node : graph.node())
    for (const std::string &p :
         fxPlaceholders(lookup(metadataOf(node, kNodeMetadataField), kFxNodeKey)))
      consumed.insert(p);
  for (auto &kv : placeholders) {
    if (kv.getValue().kind != "PARAMETER" || consumed.contains(kv.getKey()) ||
        initOfPlaceholder.count(kv.getKey()))
      continue;
    StringRef target = kv.getValue().target;
    auto [module, leaf] = target.rsplit('.');
    bool found = false;
    for (const onnxpb::NodeProto &node : graph.node()) {
      if (found)
        break;
      Metadata m = metadataOf(node, kNodeMetadataField);
      SmallVector<std::string> scopes = parsePyStrings(lookup(m, kNameScopesKey));
      if (scopes.size() < 2 || scopes[scopes.size() - 2] != module)
        continue;
      for (const std::string &in : node.input()) {
        auto it = initIndex.find(in);
        if (it == initIndex.end() || in == target ||
            leafName(in) != leaf || metaOf(in, kKindKey) != "PARAMETER")
          continue;
        tiedAliases[in].push_back(target.str());
        found = true;
        break;
      }
    }
    if (!found && !referenced.contains(kv.getKey()))
      unread.push_back(target.str());
  }
  // Neither read nor a tie: the optimizer's common-subexpression
  // elimination merged the op that read it into an identical one (equal
  // initial weights applied to one input); training the survivor alone would
  // train a different, tied model. The merge is undone where the graph shows
  // it: the surviving node N reads, in a sibling module, parameters of the
  // same attribute names, and some of its output's readers name in their FX
  // arguments not N's FX value but one no node defines any more (the twin's).
  // Those readers get a copy of N reading the unread parameters.
  if (!unread.empty()) {
    // Each node's FX value and arguments, and each value's readers, once.
    int numNodes = graph.node_size();
    std::vector<std::string> fxNames(numNodes);
    std::vector<SmallVector<std::string>> fxArgs(numNodes);
    llvm::StringSet<> fxDefined;
    llvm::StringMap<SmallVector<std::pair<int, int>>> readers;
    for (auto [i, node] : llvm::enumerate(graph.node())) {
      Metadata meta = metadataOf(node, kNodeMetadataField);
      StringRef fx = lookup(meta, kFxNodeKey);
      fxArgs[i] = fxPlaceholders(fx);
      if (fx.consume_front("%")) {
        fxNames[i] = fx.take_until([](char c) { return c == ' '; }).str();
        fxDefined.insert(fxNames[i]);
      }
      for (int k = 0; k < node.input_size(); ++k)
        readers[node.input(k)].emplace_back(i, k);
    }
    std::map<std::string, SmallVector<std::string>> byModule;
    for (const std::string &t : unread)
      byModule[StringRef(t).rsplit('.').first.str()].push_back(t);
    SmallVector<std::string> left;
    SmallVector<std::pair<int, onnxpb::NodeProto>> twins; // after node, copy
    for (auto &[module, targets] : byModule) {
      StringRef parent = StringRef(module).rsplit('.').first;
      llvm::StringMap<std::string> targetOfLeaf;
      for (const std::string &t : targets)
        targetOfLeaf[leafName(t)] = t;
      int found = -1, candidates = 0;
      SmallVector<std::pair<int, int>> twinReads; // (node, input) to move
      for (auto [i, n] : llvm::enumerate(graph.node())) {
        if (fxNames[i].empty() || n.output_size() == 0)
          continue;
        // Its parameters: all in one sibling module, leaves as the unread.
        std::string sibling;
        unsigned leaves = 0;
        bool fits = true;
        for (const std::string &in : n.input()) {
          if (!initIndex.count(in) || metaOf(in, kKindKey) != "PARAMETER")
            continue;
          auto [m, leaf] = StringRef(in).rsplit('.');
          fits &= m != module && m.rsplit('.').first == parent &&
                  targetOfLeaf.count(leaf) &&
                  (sibling.empty() || sibling == m);
          sibling = m.str();
          ++leaves;
        }
        if (!fits || leaves != targets.size())
          continue;
        SmallVector<std::pair<int, int>> reads;
        for (auto [j, k] : readers.lookup(n.output(0))) {
          const SmallVector<std::string> &args = fxArgs[j];
          if (!llvm::is_contained(args, fxNames[i]) &&
              llvm::any_of(args, [&](const std::string &a) {
                return !fxDefined.contains(a) && !placeholders.count(a);
              }))
            reads.emplace_back(j, k);
        }
        if (reads.empty())
          continue;
        ++candidates;
        found = i;
        twinReads = std::move(reads);
      }
      if (candidates != 1) {
        llvm::append_range(left, targets);
        continue;
      }
      onnxpb::NodeProto twin = graph.node(found);
      std::string survivor = twin.name();
      twin.set_name(survivor + "/" + module);
      for (int k = 1; k < twin.output_size(); ++k)
        twin.set_output(k, "");
      twin.set_output(0, twin.output(0) + "/" + module);
      for (int k = 0; k < twin.input_size(); ++k) {
        StringRef in = twin.input(k);
        if (!initIndex.count(in) || metaOf(in, kKindKey) != "PARAMETER")
          continue;
        std::string target = targetOfLeaf[leafName(in)];
        onnxpb::TensorProto copy = graph.initializer(initIndex[in]);
        copy.set_name(target);
        *graph.add_initializer() = std::move(copy);
        initIndex[target] = graph.initializer_size() - 1;
        Metadata m = info[in];
        m[kOriginalNameKey] = placeholderOfTarget[target];
        info[target] = std::move(m);
        referenced.insert(placeholderOfTarget[target]);
        paramOrigin[target] = "split from '" + in.str() +
                              "' (the exporter's optimizer had merged its "
                              "op, identical at export, into node '" +
                              survivor + "')";
        twin.set_input(k, target);
      }
      for (auto [j, k] : twinReads)
        graph.mutable_node(j)->set_input(k, twin.output(0));
      twins.emplace_back(found, std::move(twin));
    }
    // Each copy right after its survivor; from the last, so the indices of
    // the others hold.
    llvm::sort(twins, [](const auto &a, const auto &b) { return a.first > b.first; });
    for (auto &[after, twin] : twins) {
      *graph.add_node() = std::move(twin);
      for (int j = graph.node_size() - 1; j > after + 1; --j)
        graph.mutable_node()->SwapElements(j, j - 1);
    }
    unread = std::move(left);
  }
  if (!unread.empty()) {
    llvm::sort(unread);
    auto diag = error() << "parameter '" << unread.front() << "'";
    if (unread.size() > 1)
      diag << " (and " << unread.size() - 1 << " more)";
    return diag << " is in the exported program, but no node of the graph "
                   "reads it: the exporter's optimizer merged the op that "
                   "read it with an identical one (two modules with equal "
                   "initial weights applied to the same input, such as "
                   "GPT-NeoX's parallel LayerNorms), so it would not be "
                   "trained on its own. Re-export with "
                   "torch.onnx.export(..., dynamo=True, optimize=False), or "
                   "with `python -m spillway.export`; if the model never "
                   "uses it, remove it from the model before exporting";
  }
  for (auto &kv : tiedAliases) {
    std::string &o = paramOrigin[kv.getKey()];
    o += (o.empty() ? "" : "; ") + std::string("tied: also '") +
         llvm::join(kv.getValue(), "', '") + "'";
  }

  // Every parameter a torch op consumed must now be held by some value.
  for (const onnxpb::NodeProto &node : graph.node()) {
    Metadata nodeMeta = metadataOf(node, kNodeMetadataField);
    StringRef fx = lookup(nodeMeta, kFxNodeKey);
    for (const std::string &p : fxPlaceholders(fx)) {
      auto it = placeholders.find(p);
      if (it == placeholders.end() || it->second.kind != "PARAMETER" ||
          referenced.contains(p))
        continue;
      return error() << "parameter '" << it->second.target
                     << "' (consumed by the torch op of node '"
                     << nodeName(node)
                     << "') is not in the graph: the exporter's optimizer "
                        "removed or folded it, so it would not be trained. "
                        "Re-export with torch.onnx.export(..., dynamo=True, "
                        "optimize=False), or with `python -m spillway.export`";
    }
  }

  if (!unfolds.empty()) {
    SmallVector<onnxpb::NodeProto> prologue;
    llvm::StringSet<> drop;
    for (auto &[fold, target] : unfolds) {
      std::string origin;
      if (failed(unfold(graph, graph.initializer(initIndex[fold]), target,
                        prologue, origin)))
        return failure();
      paramOrigin[target] = std::move(origin);
      drop.insert(fold);
      ++restoredFolds;
    }
    computeFirst(graph, drop, prologue);
  }
  retie(graph, transposes);
  return success();
}

FailureOr<bool> Importer::isTransposeOf(const onnxpb::TensorProto &t,
                                        const onnxpb::TensorProto &src) {
  if (src.dims_size() != 2 || t.dims_size() != 2 || src.dims(0) != t.dims(1) ||
      src.dims(1) != t.dims(0))
    return false;
  std::string a, b;
  SmallVector<int64_t> sa, sb;
  if (failed(readTensor(src, "initializer", a, sa)) ||
      failed(readTensor(t, "initializer", b, sb)))
    return failure();
  int64_t r = src.dims(0), c = src.dims(1);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      if (std::memcmp(a.data() + 4 * (i * c + j), b.data() + 4 * (j * r + i),
                      4) != 0)
        return false;
  return true;
}

/// Replaces each folded initializer `view` by Transpose(`source`), computed
/// first thing in the graph.
void Importer::retie(
    onnxpb::GraphProto &graph,
    ArrayRef<std::pair<std::string, std::string>> transposes) {
  if (transposes.empty())
    return;
  llvm::StringSet<> drop;
  SmallVector<onnxpb::NodeProto> nodes;
  for (auto &[view, source] : transposes) {
    drop.insert(view);
    onnxpb::NodeProto &tr = nodes.emplace_back();
    tr.set_op_type("Transpose");
    tr.set_name("spillway_retie_" + view);
    tr.add_input(source);
    tr.add_output(view);
    onnxpb::AttributeProto *perm = tr.add_attribute();
    perm->set_name("perm");
    perm->set_type(onnxpb::AttributeProto::INTS);
    perm->add_ints(1);
    perm->add_ints(0);
  }
  computeFirst(graph, drop, nodes);
}

void Importer::computeFirst(onnxpb::GraphProto &graph,
                            const llvm::StringSet<> &drop,
                            ArrayRef<onnxpb::NodeProto> first) {
  auto *inits = graph.mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(),
                              [&](const onnxpb::TensorProto &t) {
                                return drop.contains(t.name());
                              }),
               inits->end());
  google::protobuf::RepeatedPtrField<onnxpb::NodeProto> nodes;
  for (const onnxpb::NodeProto &n : first)
    *nodes.Add() = n;
  for (auto &n : *graph.mutable_node())
    *nodes.Add() = std::move(n);
  graph.mutable_node()->Swap(&nodes);
}

/// The nn.Linear weight a TorchScript fold `t` is the transpose of: "S.weight"
/// when `t` is 2-D and read only as the B of MatMuls named "/S/.../MatMul"
/// of one module scope S (the exporter names nodes by module path); "" if
/// not.
std::string Importer::linearWeightOf(const onnxpb::GraphProto &graph,
                                     const onnxpb::TensorProto &t) {
  if (t.dims_size() != 2)
    return "";
  std::string scope;
  for (const onnxpb::NodeProto &node : graph.node())
    for (auto [k, in] : llvm::enumerate(node.input())) {
      if (in != t.name())
        continue;
      StringRef name = node.name();
      if (node.op_type() != "MatMul" || k != 1 || !name.starts_with("/"))
        return "";
      std::string s = name.drop_front().rsplit('/').first.str();
      if (s.empty() || s == name.drop_front() || (!scope.empty() && s != scope))
        return "";
      scope = s;
    }
  if (scope.empty())
    return "";
  std::replace(scope.begin(), scope.end(), '/', '.');
  return scope + ".weight";
}

/// The TorchScript exporter leaves no metadata, but its two rewrites are
/// recognizable: a parameter merged into another of equal value reads it
/// through an Identity named as the parameter itself, and a constant it
/// folded from a parameter is named "onnx::<consumer>_<n>". A fold that is
/// the transpose of a parameter the graph still uses (the tied head) is
/// computed from it again; any other fold trains as a parameter.
LogicalResult Importer::recoverTorchScriptParameters(onnxpb::GraphProto &graph) {
  llvm::StringMap<int> initIndex;
  for (auto [i, t] : llvm::enumerate(graph.initializer()))
    initIndex[t.name()] = i;
  llvm::StringSet<> outputs;
  for (const auto &o : graph.output())
    outputs.insert(o.name());
  // Merged parameters: each Identity of a float initializer becomes the
  // parameter it names, a copy of the value it shares.
  llvm::StringSet<> splitNodes;
  for (const onnxpb::NodeProto &node : graph.node()) {
    if (node.op_type() != "Identity" || node.input_size() != 1 ||
        node.output_size() != 1 || outputs.contains(node.output(0)))
      continue;
    auto it = initIndex.find(node.input(0));
    if (it == initIndex.end() ||
        graph.initializer(it->second).data_type() != onnxpb::TensorProto::FLOAT ||
        constantInitializers.contains(node.input(0)) ||
        initIndex.count(node.output(0)))
      continue;
    onnxpb::TensorProto copy = graph.initializer(it->second);
    copy.set_name(node.output(0));
    *graph.add_initializer() = std::move(copy);
    initIndex[node.output(0)] = graph.initializer_size() - 1;
    splitNodes.insert(node.output(0));
    paramOrigin[node.output(0)] = "split from '" + node.input(0) +
                                  "' (the exporter merged initializers of "
                                  "equal value)";
  }
  if (!splitNodes.empty()) {
    auto *nodes = graph.mutable_node();
    nodes->erase(std::remove_if(nodes->begin(), nodes->end(),
                                [&](const onnxpb::NodeProto &n) {
                                  return n.op_type() == "Identity" &&
                                         n.output_size() == 1 &&
                                         splitNodes.contains(n.output(0));
                                }),
                 nodes->end());
  }
  // Folded constants.
  SmallVector<std::pair<std::string, std::string>> transposes, renames;
  for (const onnxpb::TensorProto &t : graph.initializer()) {
    if (t.data_type() != onnxpb::TensorProto::FLOAT ||
        !StringRef(t.name()).starts_with("onnx::") ||
        constantInitializers.contains(t.name()))
      continue;
    std::string tied;
    for (const onnxpb::TensorProto &p : graph.initializer()) {
      if (&p == &t || p.data_type() != onnxpb::TensorProto::FLOAT ||
          StringRef(p.name()).starts_with("onnx::"))
        continue;
      FailureOr<bool> tr = isTransposeOf(t, p);
      if (failed(tr))
        return failure();
      if (*tr) {
        tied = p.name();
        break;
      }
    }
    if (!tied.empty()) {
      transposes.emplace_back(t.name(), tied);
      paramOrigin[tied] = "also read transposed as '" + t.name() +
                          "' (the exporter had folded a copy; it is computed "
                          "from this parameter again)";
    } else if (auto weight = linearWeightOf(graph, t); !weight.empty() &&
                                                       !initIndex.count(weight)) {
      // nn.Linear's weight, transposed for MatMul and folded: the weight
      // again, in torch's layout, named by the MatMul's module scope.
      renames.emplace_back(t.name(), weight);
    } else {
      paramOrigin[t.name()] = "folded by the exporter from a parameter it "
                              "no longer names; trains as that parameter "
                              "(--constant-initializers if it is a constant)";
    }
  }
  for (auto &[folded, weight] : renames) {
    graph.mutable_initializer(initIndex[folded])->set_name(weight);
    initIndex[weight] = initIndex[folded];
    transposedStorage.insert(weight);
    transposes.emplace_back(folded, weight);
    paramOrigin[weight] = "stored transposed as '" + folded +
                          "' by the exporter's constant folding; trained in "
                          "torch's layout";
  }
  retie(graph, transposes);
  return success();
}
