//===- ImportONNX.cpp - ONNX training graph -> train dialect --------------===//
//
// Reads a ModelProto (binary or ONNX textual syntax), propagates static shapes
// while it builds train ops, declares float initializers as train.param and
// writes the weights file: the parameters' bytes when they all came inline in
// the model, else a weights map that says where they lie (WeightsMap.h), so
// that external data is never read at compile time.
//
// Integer and bool initializers and Constant nodes are compile-time constants,
// and so is everything the importer can compute from them: exporters leave
// shape arithmetic in the graph (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape, Range -> Less -> Where causal masks, ConstantOfShape -> Trilu), and
// the importer evaluates it (ConstantFolder.cpp) so that only real compute
// reaches the IR. Constants that real compute consumes become train.constant.
// Float initializers are parameters and never fold: their values change as the
// model trains. The exception is those the user names frozen
// (`constantInitializers`: buffers such as a rotary inv_freq), which are
// constants like the integer ones.
//
// libonnx 1.12 knows default-domain opsets only up to 17, so nothing here uses
// its schemas, checker or shape inference: only the protobuf classes and the
// textual-syntax parser.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "spillway/Support/ToolMain.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <onnx/defs/parser.h>

#include <exception>

using namespace mlir;
using namespace spillway;
using namespace spillway::onnx_import;

namespace {

// Default-domain opsets. From 7 (numpy broadcasting in the elementwise ops)
// the mapped ops differ from their current form only in ways the importer
// handles: attribute-borne axes/splits (before 13, or 18 for ReduceMean/Max),
// Softmax's 2-D coercion (before 13), Dropout's ratio attribute (before 12).
// Ops that appear later, or whose older versions differ (Slice before 10
// took attributes), have their own floor, `kOpMinOpset`. Above 21, to onnx
// 1.23's 28, the mapped ops changed only by admitting new element types, plus
// attributes that apply to none of ours: Cast/CastLike `round_mode`
// (float8e8m0 targets only) and Range `stash_type` (float16/bfloat16 only).
// ReduceMax 20 admits bool, which the importer maps.
constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 28;
const llvm::StringMap<int64_t> kOpMinOpset = {
    {"Expand", 8},       {"ConstantOfShape", 9},
    {"Erf", 9},          {"Where", 9},
    {"Slice", 10},       {"Range", 11},
    {"SplitToSequence", 11}, {"SequenceAt", 11},
    {"SoftmaxCrossEntropyLoss", 12}, {"GreaterOrEqual", 12},
    {"LessOrEqual", 12}, {"Trilu", 14},
    {"CastLike", 15},    {"LayerNormalization", 17},
    {"Gelu", 20},        {"IsNaN", 9},
    {"Pad", 11},         {"CumSum", 11}};
/// IR versions: from 3 (the first with opset_import) to onnx 1.23's 14, the
/// newest whose ModelProto fields the importer knows (onnx's checker refuses
/// newer ones too).
constexpr int64_t kMinIRVersion = 3;
constexpr int64_t kMaxIRVersion = 14;

/// The training-op domain, and the ops of it imported (in --forward mode).
constexpr const char *kTrainingDomain = "ai.onnx.preview.training";
const char *const kSupportedTrainingOps = "Adam";

/// How many inputs (optional ones included, "" for an absent one) and
/// outputs a default-domain op takes, as its ONNX schema says at `opset`.
struct Arity {
  int minInputs, maxInputs, maxOutputs;
};
constexpr int kVariadic = std::numeric_limits<int>::max();

std::optional<Arity> arityOf(StringRef op, int64_t opset) {
  // Ops whose axes or split moved from an attribute to an input.
  auto axesInput = [&](int64_t since) { return opset >= since ? 2 : 1; };
  return llvm::StringSwitch<std::optional<Arity>>(op)
      .Cases({"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less",
              "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or"},
             Arity{2, 2, 1})
      .Cases({"Neg", "Relu", "Tanh", "Sqrt", "Reciprocal", "Exp", "Log", "Erf",
              "Sigmoid", "Cos", "Sin", "Not", "Identity", "Gelu", "Softmax",
              "Shape", "Flatten", "Transpose", "Cast", "ConstantOfShape",
              "IsNaN"},
             Arity{1, 1, 1})
      .Cases({"CastLike", "Expand", "Gather", "MatMul", "Reshape",
              "SequenceAt"},
             Arity{2, 2, 1})
      .Case("Constant", Arity{0, 0, 1})
      .Case("Concat", Arity{1, kVariadic, 1})
      .Case("Dropout", Arity{1, opset >= 12 ? 3 : 1, 2})
      .Case("Gemm", Arity{2, 3, 1})
      .Case("LayerNormalization", Arity{2, 3, 3})
      .Cases({"Range", "Where"}, Arity{3, 3, 1})
      .Case("ReduceSum", Arity{1, axesInput(13), 1})
      .Cases({"ReduceMean", "ReduceMax"}, Arity{1, axesInput(18), 1})
      .Case("Squeeze", Arity{1, axesInput(13), 1})
      .Case("Unsqueeze", opset >= 13 ? Arity{2, 2, 1} : Arity{1, 1, 1})
      .Case("Slice", Arity{3, 5, 1})
      .Case("Split", Arity{1, axesInput(13), kVariadic})
      .Case("SplitToSequence", Arity{1, 2, 1})
      .Case("SoftmaxCrossEntropyLoss", Arity{2, 3, 2})
      .Case("Trilu", Arity{1, 2, 1})
      .Case("CumSum", Arity{2, 2, 1})
      .Case("Pad", Arity{2, opset >= 18 ? 4 : 3, 1})
      .Default(std::nullopt);
}

using AttrType = onnxpb::AttributeProto::AttributeType;

/// The type of attribute `name` of `op` where the importer reads it; nullopt
/// for an attribute it does not read.
std::optional<AttrType> attrTypeOf(StringRef op, StringRef name) {
  using A = onnxpb::AttributeProto;
  static const llvm::StringMap<llvm::StringMap<AttrType>> kAttrs = {
      {"Shape", {{"start", A::INT}, {"end", A::INT}}},
      {"Unsqueeze", {{"axes", A::INTS}}},
      {"Squeeze", {{"axes", A::INTS}}},
      {"ReduceSum", {{"axes", A::INTS}, {"keepdims", A::INT},
                     {"noop_with_empty_axes", A::INT}}},
      {"ReduceMean", {{"axes", A::INTS}, {"keepdims", A::INT},
                      {"noop_with_empty_axes", A::INT}}},
      {"ReduceMax", {{"axes", A::INTS}, {"keepdims", A::INT},
                     {"noop_with_empty_axes", A::INT}}},
      {"Reshape", {{"allowzero", A::INT}}},
      {"Flatten", {{"axis", A::INT}}},
      {"Transpose", {{"perm", A::INTS}}},
      {"Split", {{"axis", A::INT}, {"split", A::INTS},
                 {"num_outputs", A::INT}}},
      {"SplitToSequence", {{"axis", A::INT}, {"keepdims", A::INT}}},
      {"Cast", {{"to", A::INT}}},
      {"Concat", {{"axis", A::INT}}},
      {"Gather", {{"axis", A::INT}}},
      {"ConstantOfShape", {{"value", A::TENSOR}}},
      {"Trilu", {{"upper", A::INT}}},
      {"CumSum", {{"exclusive", A::INT}, {"reverse", A::INT}}},
      {"Pad", {{"mode", A::STRING}}},
      {"Constant", {{"value", A::TENSOR}, {"value_float", A::FLOAT},
                    {"value_floats", A::FLOATS}, {"value_int", A::INT},
                    {"value_ints", A::INTS}}},
      {"Adam", {{"alpha", A::FLOAT}, {"beta", A::FLOAT}, {"epsilon", A::FLOAT},
                {"norm_coefficient", A::FLOAT},
                {"norm_coefficient_post", A::FLOAT}}},
      {"SoftmaxCrossEntropyLoss", {{"reduction", A::STRING},
                                   {"ignore_index", A::INT}}},
      {"Gelu", {{"approximate", A::STRING}}},
      {"Softmax", {{"axis", A::INT}}},
      {"Gemm", {{"alpha", A::FLOAT}, {"beta", A::FLOAT}, {"transA", A::INT},
                {"transB", A::INT}}},
      {"LayerNormalization", {{"axis", A::INT}, {"epsilon", A::FLOAT},
                              {"stash_type", A::INT}}},
  };
  auto op_ = kAttrs.find(op);
  if (op_ == kAttrs.end())
    return std::nullopt;
  auto it = op_->second.find(name);
  if (it == op_->second.end())
    return std::nullopt;
  return it->second;
}

bool isDefaultDomain(StringRef domain) {
  return domain.empty() || domain == "ai.onnx";
}

} // namespace

//===----------------------------------------------------------------------===//
// Nodes
//===----------------------------------------------------------------------===//

InFlightDiagnostic Importer::nodeError(const onnxpb::NodeProto &node) {
  return error() << "node '" << nodeName(node) << "' (" << node.op_type()
                 << "): ";
}

std::string Importer::nodeName(const onnxpb::NodeProto &node) const {
  return node.name().empty() ? "#" + std::to_string(nodeIndex) : node.name();
}

/// What the ONNX schema fixes and the importer would otherwise skip over: the
/// number of inputs and outputs, and the type of each attribute it reads
/// (a `transB = 1.0` would read as 0). An input past the schema's count or
/// an attribute of the wrong type changes what the model computes, so each
/// is an error, not ignored.
LogicalResult Importer::checkNode(const onnxpb::NodeProto &node) {
  StringRef op = node.op_type();
  llvm::StringSet<> seen;
  for (const auto &a : node.attribute()) {
    if (!seen.insert(a.name()).second)
      return nodeError(node) << "attribute '" << a.name()
                             << "' is given twice";
    std::optional<AttrType> want = attrTypeOf(op, a.name());
    if (want && a.type() != *want)
      return nodeError(node)
             << "attribute '" << a.name() << "' must be of type "
             << onnxpb::AttributeProto_AttributeType_Name(*want) << ", got "
             << (onnxpb::AttributeProto_AttributeType_IsValid(a.type())
                     ? onnxpb::AttributeProto_AttributeType_Name(a.type())
                     : "type #" + std::to_string(a.type()));
  }
  if (!isDefaultDomain(node.domain()))
    return success(); // Adam checks its own (variadic) arity
  std::optional<Arity> arity = arityOf(op, opset);
  if (!arity)
    return success(); // not imported: importNode says so
  int nin = node.input_size(), nout = node.output_size();
  auto count = [](int lo, int hi, StringRef noun) {
    std::string n = lo == hi ? std::to_string(lo)
                    : hi == kVariadic
                        ? std::to_string(lo) + " or more"
                        : std::to_string(lo) + " to " + std::to_string(hi);
    return n + " " + noun.str() + (lo == 1 && hi == 1 ? "" : "s");
  };
  if (nin < arity->minInputs || nin > arity->maxInputs)
    return nodeError(node) << op << " (opset " << opset << ") takes "
                           << count(arity->minInputs, arity->maxInputs, "input")
                           << ", got " << nin;
  if (nout > arity->maxOutputs)
    return nodeError(node) << op << " (opset " << opset << ") has "
                           << count(1, arity->maxOutputs, "output")
                           << ", got " << nout;
  return success();
}

/// Records the node's outputs as defined, refusing a name that a graph
/// input, an initializer or an earlier node (or this one) already defines.
LogicalResult Importer::defineOutputs(const onnxpb::NodeProto &node) {
  std::string self = "node '" + nodeName(node) + "' (" + node.op_type() + ")";
  for (const std::string &out : node.output()) {
    if (out.empty())
      continue;
    auto [it, inserted] = definedBy.try_emplace(out, self);
    if (!inserted)
      return nodeError(node)
             << "output '" << out << "' is already defined by "
             << (it->second == self ? std::string("this node") : it->second)
             << "; an ONNX graph assigns each name once";
  }
  return success();
}

SmallVector<Importer::OpImporterEntry> Importer::allOpImporters() {
  SmallVector<OpImporterEntry> all;
  for (ArrayRef<OpImporterEntry> family :
       {constantOps(), elementwiseOps(), shapeOps(), reductionOps(),
        linearOps(), lossOps()})
    llvm::append_range(all, family);
  return all;
}

const llvm::StringMap<Importer::OpImporter> &Importer::opImporters() {
  static const llvm::StringMap<OpImporter> importers = [] {
    llvm::StringMap<OpImporter> map;
    for (const OpImporterEntry &entry : allOpImporters()) {
      [[maybe_unused]] bool added =
          map.try_emplace(entry.op, entry.import).second;
      assert(added && "two importers for one op");
    }
    return map;
  }();
  return importers;
}

const std::string &Importer::supportedOps() {
  static const std::string list = [] {
    SmallVector<OpImporterEntry> entries = allOpImporters();
    llvm::sort(entries, [](const OpImporterEntry &a, const OpImporterEntry &b) {
      return a.op < b.op;
    });
    std::string s;
    for (const OpImporterEntry &entry : entries) {
      if (!s.empty())
        s += ", ";
      s += entry.op;
      if (!entry.note.empty())
        s += (" (" + entry.note + ")").str();
    }
    return s;
  }();
  return list;
}

LogicalResult Importer::importNode(const onnxpb::NodeProto &node) {
  StringRef op = node.op_type();
  if (failed(checkNode(node)))
    return failure();
  if (node.domain() == kTrainingDomain && op == "Adam")
    return importAdam(node,
                      NameLoc::get(builder.getStringAttr(nodeName(node))));
  if (!isDefaultDomain(node.domain())) {
    auto it = opsets.find(node.domain());
    return error() << "node '" << nodeName(node) << "' (" << op << ", domain '"
                   << node.domain() << "', opset "
                   << (it == opsets.end() ? std::string("not imported")
                                          : std::to_string(it->second))
                   << ") is not supported by Spillway's importer yet; "
                      "supported ops (default domain): "
                   << supportedOps() << "; (domain '" << kTrainingDomain
                   << "', --forward only): " << kSupportedTrainingOps;
  }
  if (node.output_size() < 1 || node.output(0).empty())
    return nodeError(node) << "has no output";
  if (auto it = kOpMinOpset.find(op);
      it != kOpMinOpset.end() && opset < it->second)
    return nodeError(node) << op << " is not an opset " << opset
                           << " op; Spillway imports it from opset "
                           << it->second << " (re-export the model at a "
                                            "newer opset)";
  for (int i = 1; i < node.output_size(); ++i)
    if (isOutputUsed(node, i) && op != "LayerNormalization" &&
        op != "SoftmaxCrossEntropyLoss" && op != "Split" && op != "Dropout")
      return nodeError(node) << "output " << i << " ('" << node.output(i)
                             << "') is used but not supported";
  Location loc = NameLoc::get(builder.getStringAttr(nodeName(node)));
  // Constant inputs fold first (Shape always does); only what is left, and
  // the ops that never fold, reach their importer.
  FailureOr<bool> folded = fold(node);
  if (failed(folded))
    return failure();
  if (*folded)
    return success();
  const llvm::StringMap<OpImporter> &importers = opImporters();
  if (auto it = importers.find(op); it != importers.end())
    return (this->*it->second)(node, loc);
  return error() << "node '" << nodeName(node) << "' (" << op
                 << ", domain 'ai.onnx', opset " << opset
                 << ") is not supported by Spillway's importer yet; supported "
                    "ops: "
                 << supportedOps();
}

//===----------------------------------------------------------------------===//
// Model
//===----------------------------------------------------------------------===//

OwningOpRef<ModuleOp> Importer::import(onnxpb::ModelProto &model) {
  if (model.ir_version() < kMinIRVersion || model.ir_version() > kMaxIRVersion)
    return error() << "'" << modelPath << "' has IR version "
                   << model.ir_version() << "; Spillway reads IR versions "
                   << kMinIRVersion << " to " << kMaxIRVersion
                   << " (onnx 1.23; re-export the model, or convert it with "
                      "onnx.version_converter)",
           nullptr;
  for (const auto &imp : model.opset_import()) {
    std::string domain = isDefaultDomain(imp.domain()) ? "" : imp.domain();
    // Two versions of one domain: which one the nodes mean is a guess.
    if (!opsets.try_emplace(domain, imp.version()).second)
      return error() << "'" << modelPath << "' imports domain '"
                     << (domain.empty() ? std::string("ai.onnx") : domain)
                     << "' twice (opset_import); import each domain once",
             nullptr;
  }
  auto it = opsets.find("");
  bool usesDefault = llvm::any_of(model.graph().node(), [](const auto &n) {
    return isDefaultDomain(n.domain());
  });
  if (it == opsets.end() && usesDefault)
    return error() << "'" << modelPath
                   << "' does not import the default ONNX domain (no "
                      "opset_import for 'ai.onnx')",
           nullptr;
  // A graph of only other domains' ops (e.g. one training-domain Adam node)
  // needs no default opset; no default-domain node consults this one.
  opset = it == opsets.end() ? kMaxOpset : it->second;
  opsets["ai.onnx"] = opset;
  if (opset < kMinOpset || opset > kMaxOpset)
    return error() << "'" << modelPath << "' uses ONNX opset " << opset
                   << "; Spillway imports opsets " << kMinOpset << " to "
                   << kMaxOpset << " (re-export the model, e.g. "
                   << "torch.onnx.export(..., opset_version=17))",
           nullptr;

  const onnxpb::GraphProto &graph = model.graph();
  if (graph.output_size() == 0)
    return error() << "the graph has no outputs"
                   << (opts.forwardOnly ? "" : "; it must end in its loss"),
           nullptr;
  for (const auto &node : graph.node())
    for (const auto &in : node.input())
      usedNames.insert(in);
  for (const auto &out : graph.output())
    usedNames.insert(out.name());

  module = ModuleOp::create(UnknownLoc::get(&ctx));
  OwningOpRef<ModuleOp> owner(module);
  module->setAttr(train::kWeightsAttrName,
                  builder.getStringAttr(opts.weightsAttr));
  paramBlock = module.getBody();

  for (const std::string &name : opts.constantInitializers) {
    if (llvm::any_of(graph.initializer(), [&](const onnxpb::TensorProto &t) {
          return t.name() == name;
        })) {
      constantInitializers.insert(name);
      continue;
    }
    // Name the initializers the user may have meant.
    SmallVector<std::pair<unsigned, StringRef>> close;
    for (const auto &t : graph.initializer()) {
      StringRef cand = t.name();
      unsigned limit = std::max<size_t>(name.size(), cand.size()) / 3;
      unsigned dist = StringRef(name).edit_distance(cand, true, limit + 1);
      if (dist <= limit || cand.contains(name) ||
          (!cand.empty() && StringRef(name).contains(cand)))
        close.emplace_back(dist, cand);
    }
    llvm::sort(close);
    auto diag = error() << "--constant-initializers: '" << name
                        << "' is not an initializer of the model";
    if (close.empty()) {
      diag << " (it has " << graph.initializer_size() << " initializers)";
    } else {
      diag << "; did you mean ";
      for (auto [i, c] : llvm::enumerate(ArrayRef(close).take_front(5)))
        diag << (i ? ", " : "") << "'" << c.second << "'";
      diag << "?";
    }
    return nullptr;
  }
  if (failed(recoverParameters(model)))
    return nullptr;
  if (opts.exportedStateDict && restoredFolds == 0)
    emitWarning(fileLoc) << "--exported-state-dict: the export folded no "
                            "parameter into a part of it; nothing was "
                            "restored from '"
                         << *opts.exportedStateDict << "'";
  if (opts.stateDictPrefix) {
    stateDictPrefix = *opts.stateDictPrefix;
    for (const auto &t : graph.initializer())
      if (t.data_type() == onnxpb::TensorProto::FLOAT &&
          !constantInitializers.contains(t.name()) &&
          !StringRef(t.name()).starts_with(stateDictPrefix))
        return error() << "--state-dict-prefix '" << stateDictPrefix
                       << "': parameter '" << t.name()
                       << "' does not start with it",
               nullptr;
  }
  if (!tiedAliases.empty()) {
    SmallVector<NamedAttribute> entries;
    for (auto &kv : tiedAliases)
      entries.emplace_back(builder.getStringAttr(kv.getKey()),
                           builder.getStrArrayAttr(SmallVector<StringRef>(
                               kv.getValue().begin(), kv.getValue().end())));
    module->setAttr(train::kParamAliasesAttrName,
                    builder.getDictionaryAttr(entries));
  }
  if (!foldSources.empty()) {
    SmallVector<NamedAttribute> entries;
    for (auto &kv : foldSources) {
      entries.emplace_back(builder.getStringAttr(kv.getKey()),
                           builder.getStringAttr(kv.getValue()));
      emitRemark(fileLoc)
          << "'" << kv.getKey() << "' is the rows of parameter '"
          << kv.getValue()
          << "' the export reads (the exporter's optimizer folded the "
             "parameter into them; any other rows are not in the file): it "
             "trains as those rows do, and --save writes it as '"
          << kv.getKey()
          << "'. To train and save the parameter whole under its own name, "
             "give spillwayc --exported-state-dict FILE (the model's "
             "state_dict as exported, e.g. model.save_pretrained's "
             "model.safetensors)";
    }
    module->setAttr(train::kParamFoldsAttrName,
                    builder.getDictionaryAttr(entries));
  }
  if (!stateDictPrefix.empty())
    module->setAttr(train::kStateDictPrefixAttrName,
                    builder.getStringAttr(stateDictPrefix));
  for (const auto &init : graph.initializer())
    if (failed(declareInitializer(init)))
      return nullptr;
  if (opts.parameterLog) {
    llvm::raw_ostream &os = *opts.parameterLog;
    os << "== Parameters of '" << modelPath << "': " << params.size()
       << " trained, " << constantInitializers.size()
       << " float initializers constant\n";
    for (const auto &init : graph.initializer()) {
      auto it = params.find(init.name());
      if (it == params.end())
        continue;
      os << "  " << init.name() << " "
         << shapeStr(it->second.getTensorType().getShape());
      if (auto o = paramOrigin.find(init.name()); o != paramOrigin.end())
        os << ": " << o->second;
      os << "\n";
    }
  } else if (!paramOrigin.empty()) {
    emitRemark(fileLoc) << paramOrigin.size()
                        << " parameters were recovered from what the "
                           "exporter's optimizer made of them (folded, merged "
                           "or removed); they train as torch trains them "
                           "(spillwayc -v lists them)";
  }
  if (graph.sparse_initializer_size())
    return error() << "sparse initializers are not supported", nullptr;

  SmallVector<Type> argTypes;
  SmallVector<StringRef> argNames;
  for (const auto &init : graph.initializer())
    definedBy[init.name()] = "an initializer";
  llvm::StringSet<> inputNames;
  for (const auto &in : graph.input()) {
    if (in.name().empty())
      return error() << "a graph input has no name", nullptr;
    if (!inputNames.insert(in.name()).second)
      return error() << "graph input '" << in.name()
                     << "' is listed twice; each input needs its own name",
             nullptr;
    if (params.count(in.name()) || consts.count(in.name())) {
      // Old exporters list initializers as inputs too; such an input is the
      // initializer. One declared with another type is a different tensor
      // under the same name.
      if (failed(checkInputMatchesInitializer(in)))
        return nullptr;
      continue;
    }
    definedBy[in.name()] = "a graph input";
    if (failed(declareInput(in, argTypes)))
      return nullptr;
    argNames.push_back(in.name());
  }
  // torch.export turns two arguments given the same tensor into one input
  // ((ids, ids) for input_ids and labels): the other is read by nothing, and
  // the model trains on the wrong data without a word.
  for (StringRef name : argNames)
    if (!usedNames.contains(name))
      emitWarning(fileLoc)
          << "graph input '" << name
          << "' is read by no node: the model ignores what is fed to it. If "
             "the export was given one tensor for two arguments (e.g. (ids, "
             "ids) for input_ids and labels), torch.export made them one "
             "input: export with distinct tensors (labels = ids.clone())";
  for (const auto &kv : opts.dimBindings)
    if (!usedBindings.contains(kv.getKey()))
      emitWarning(fileLoc)
          << "--bind " << kv.getKey()
          << " names no symbolic dimension of a graph input";

  builder.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(builder, UnknownLoc::get(&ctx), "main",
                                   builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(argNames)) {
    func.setArgAttr(i, train::kInputNameAttrName, builder.getStringAttr(name));
    values[name] = entry->getArgument(i);
  }
  builder.setInsertionPointToEnd(entry);

  for (const auto &node : graph.node()) {
    if (failed(defineOutputs(node)) || failed(importNode(node)))
      return nullptr;
    ++nodeIndex;
  }

  SmallVector<Value> results;
  if (opts.forwardOnly) {
    // Every output, by name; constants (folded or not) become train.constant.
    for (const auto &output : graph.output()) {
      StringRef name = output.name();
      if (!isKnown(name))
        return error() << "graph output '" << name
                       << "' is not produced by any node",
               nullptr;
      onnxpb::NodeProto outputNode;
      outputNode.set_name("graph output '" + output.name() + "'");
      outputNode.set_op_type("output");
      auto v = getValue(outputNode, name);
      if (failed(v))
        return nullptr;
      results.push_back(*v);
    }
  } else {
    StringRef lossName = graph.output(0).name();
    Value loss = values.lookup(lossName);
    if (!loss) {
      if (getConst(lossName))
        return error() << "graph output '" << lossName
                       << "' is a constant; the graph must end in its loss",
               nullptr;
      if (params.count(lossName))
        return error() << "graph output '" << lossName
                       << "' is an initializer; the graph must end in its "
                          "loss",
               nullptr;
      return error() << "graph output '" << lossName
                     << "' is not produced by any node",
             nullptr;
    }
    auto lossType = cast<RankedTensorType>(loss.getType());
    if (lossType.getRank() != 0 || !lossType.getElementType().isF32())
      return error() << "graph output '" << lossName << "' has shape "
                     << shapeStr(lossType.getShape()) << " of "
                     << lossType.getElementType()
                     << "; Spillway trains on the graph's first output, which "
                        "must be a scalar float32 loss: the graph must end in "
                        "its loss (e.g. SoftmaxCrossEntropyLoss with "
                        "reduction \"mean\"), or import with --forward for "
                        "inference",
             nullptr;
    for (int i = 1; i < graph.output_size(); ++i)
      emitWarning(fileLoc)
          << "ignoring graph output '" << graph.output(i).name()
          << "': Spillway trains on the first output (the loss) only";
    results.push_back(loss);
  }
  func::ReturnOp::create(builder, UnknownLoc::get(&ctx), results);
  func.setType(builder.getFunctionType(argTypes, ValueRange(results).getTypes()));
  if (opts.forwardOnly) {
    func->setAttr(train::kForwardOnlyAttrName, builder.getUnitAttr());
    for (auto [i, output] : llvm::enumerate(graph.output()))
      func.setResultAttr(i, train::kInputNameAttrName,
                         builder.getStringAttr(output.name()));
  }

  if (failed(verify(module)))
    return error() << "internal error: the imported module does not verify",
           nullptr;

  if (!opts.weightsPath.empty()) {
    // Raw when every parameter's bytes came with the model (byte for byte
    // what earlier versions wrote) or when asked to copy; otherwise a map,
    // and the external data is never read here.
    std::string message;
    bool raw = weightSources.empty() || opts.copyWeights;
    bool written =
        raw ? weights::writeRaw(opts.weightsPath, weightsSize, weightSources,
                                weightSegments, message)
            : weights::writeMap(opts.weightsPath, weightsSize, weightSources,
                                weightSegments, message);
    if (!written)
      return error() << message, nullptr;
  }
  return owner;
}

//===----------------------------------------------------------------------===//
// Public API
//===----------------------------------------------------------------------===//

/// Parses the file into `model`; false (with a diagnostic) on failure.
static bool loadModel(StringRef path, MLIRContext &ctx,
                      onnxpb::ModelProto &model) {
  auto buf = llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/false);
  if (!buf) {
    emitError(modelFileLoc(ctx, path))
        << "cannot read '" << path << "': " << buf.getError().message();
    return false;
  }
  StringRef data = (*buf)->getBuffer();
  if (path.ends_with(".onnxtext") || path.ends_with(".onnxtxt")) {
    // libonnx's parser recurses once per nesting level (subgraphs, lists):
    // deep nesting is refused before it overflows the stack. (The binary
    // parser stops at protobuf's recursion limit, 100.)
    std::string error;
    if (!checkNesting(data, "", CommentStyle::ONNX, error)) {
      emitError(modelFileLoc(ctx, path)) << error;
      return false;
    }
    auto status = onnxpb::OnnxParser::Parse(model, data.str().c_str());
    if (!status.IsOK()) {
      emitError(modelFileLoc(ctx, path))
          << "'" << path << "' is not an ONNX model (textual syntax parse "
          << "failed): " << status.ErrorMessage();
      return false;
    }
    return true;
  }
  if (data.size() > (size_t)INT_MAX ||
      !model.ParseFromArray(data.data(), (int)data.size())) {
    emitError(modelFileLoc(ctx, path))
        << "'" << path << "' is not an ONNX model (protobuf parse failed: "
        << "truncated or not a ModelProto)";
    return false;
  }
  // Many byte strings parse as some protobuf; a model has a graph and an IR
  // version.
  if (!model.has_graph() || model.ir_version() <= 0) {
    emitError(modelFileLoc(ctx, path))
        << "'" << path << "' is not an ONNX model (protobuf parse failed: "
        << (model.has_graph() ? "no ir_version" : "no graph") << ")";
    return false;
  }
  return true;
}

OwningOpRef<ModuleOp> spillway::importONNXFile(StringRef path,
                                               MLIRContext &ctx,
                                               const ONNXImportOptions &opts) {
  ctx.loadDialect<train::TrainDialect, func::FuncDialect>();
  try {
    onnxpb::ModelProto model;
    if (!loadModel(path, ctx, model))
      return nullptr;
    Importer importer(ctx, path, opts);
    return importer.import(model);
  } catch (const std::exception &e) {
    emitError(modelFileLoc(ctx, path))
        << "while importing '" << path << "': " << e.what();
    return nullptr;
  } catch (...) {
    emitError(modelFileLoc(ctx, path))
        << "while importing '" << path << "': unknown exception";
    return nullptr;
  }
}

LogicalResult spillway::parseDimBindings(StringRef spec,
                                         llvm::StringMap<int64_t> &out,
                                         std::string &error) {
  SmallVector<StringRef> entries;
  spec.split(entries, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef entry : entries) {
    entry = entry.trim();
    auto [name, value] = entry.split('=');
    name = name.trim();
    value = value.trim();
    int64_t n;
    if (name.empty() || !entry.contains('=') || value.getAsInteger(10, n) ||
        n <= 0) {
      error = ("bad binding '" + entry +
               "': expected NAME=INT with a positive INT")
                  .str();
      return failure();
    }
    out[name] = n;
  }
  return success();
}

void spillway::printSupportedONNXOps(llvm::raw_ostream &os) {
  SmallVector<StringRef> ops;
  StringRef(Importer::supportedOps()).split(ops, ", ");
  for (StringRef op : ops) {
    auto [name, note] = op.split(' ');
    os << name << (note == "(constant)" ? " constant-only" : "") << "\n";
  }
  // Ops of another domain: NAME DOMAIN [forward-only].
  SmallVector<StringRef> training;
  StringRef(kSupportedTrainingOps).split(training, ", ");
  for (StringRef op : training)
    os << op << " " << kTrainingDomain << " forward-only\n";
}

void spillway::setDefaultWeightsPaths(StringRef mlirOutputPath,
                                      StringRef modelPath,
                                      ONNXImportOptions &opts) {
  if (mlirOutputPath.empty() || mlirOutputPath == "-") {
    opts.weightsPath =
        (llvm::sys::path::stem(modelPath) + ".weights.bin").str();
    opts.weightsAttr = opts.weightsPath;
    return;
  }
  SmallString<256> path(mlirOutputPath);
  llvm::sys::path::replace_extension(path, "weights.bin");
  opts.weightsPath = path.str().str();
  opts.weightsAttr = llvm::sys::path::filename(path).str();
}
