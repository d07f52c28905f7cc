//===- TrainAttrs.cpp - train dialect attributes --------------------------===//

#include "spillway/Dialect/Train/IR/TrainAttrs.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace spillway::train;

/// `[0, 5]`, possibly empty.
static ParseResult parseLayerIndices(AsmParser &parser,
                                     SmallVector<int64_t> &indices) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
    return parser.parseInteger(indices.emplace_back());
  });
}
static void printLayerIndices(AsmPrinter &printer, ArrayRef<int64_t> indices) {
  printer << '[';
  llvm::interleaveComma(indices, printer);
  printer << ']';
}

/// `[@a, @b]`, possibly empty.
static ParseResult parseSymbolList(AsmParser &parser,
                                   SmallVector<FlatSymbolRefAttr> &symbols) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
    return parser.parseAttribute(symbols.emplace_back());
  });
}
static void printSymbolList(AsmPrinter &printer,
                            ArrayRef<FlatSymbolRefAttr> symbols) {
  printer << '[';
  llvm::interleaveComma(symbols, printer,
                        [&](FlatSymbolRefAttr s) { printer.printAttribute(s); });
  printer << ']';
}

#define GET_ATTRDEF_CLASSES
#include "spillway/Dialect/Train/IR/TrainAttrs.cpp.inc"

void TrainDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "spillway/Dialect/Train/IR/TrainAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// SharedParamAttr
//===----------------------------------------------------------------------===//

LogicalResult
SharedParamAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        FlatSymbolRefAttr param, ArrayRef<int64_t> usedBy,
                        ArrayRef<int64_t> gradFrom) {
  for (ArrayRef<int64_t> list : {usedBy, gradFrom})
    for (int64_t l : list)
      if (l < 0)
        return emitError() << "#train.shared<" << param
                           << ">: layer index " << l << " is negative";
  return success();
}

//===----------------------------------------------------------------------===//
// LayerAttr
//===----------------------------------------------------------------------===//

// #train.layer<"name", params = [...] (, shared = [...])? (, uses = [...])?>
Attribute LayerAttr::parse(AsmParser &parser, Type) {
  std::string name;
  SmallVector<FlatSymbolRefAttr> params, uses;
  SmallVector<SharedParamAttr> shared;
  if (parser.parseLess() || parser.parseString(&name) || parser.parseComma() ||
      parser.parseKeyword("params") || parser.parseEqual() ||
      parseSymbolList(parser, params))
    return {};
  bool seenShared = false, seenUses = false;
  while (succeeded(parser.parseOptionalComma())) {
    StringRef key;
    llvm::SMLoc at = parser.getCurrentLocation();
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return {};
    if (key == "shared" && !seenShared) {
      seenShared = true;
      if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
            return parser.parseAttribute(shared.emplace_back());
          }))
        return {};
    } else if (key == "uses" && !seenUses) {
      seenUses = true;
      if (parseSymbolList(parser, uses))
        return {};
    } else {
      parser.emitError(at) << "expected 'shared' or 'uses' (each once), got '"
                           << key << "'";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return LayerAttr::getChecked(
      [&] { return parser.emitError(parser.getNameLoc()); },
      parser.getContext(), name, params, shared, uses);
}

void LayerAttr::print(AsmPrinter &printer) const {
  printer << "<\"";
  llvm::printEscapedString(getName(), printer.getStream());
  printer << "\", params = ";
  printSymbolList(printer, getParams());
  if (!getShared().empty()) {
    printer << ", shared = [";
    llvm::interleaveComma(getShared(), printer, [&](SharedParamAttr s) {
      printer.printAttribute(s);
    });
    printer << ']';
  }
  if (!getUses().empty()) {
    printer << ", uses = ";
    printSymbolList(printer, getUses());
  }
  printer << '>';
}

LogicalResult LayerAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                StringRef name,
                                ArrayRef<FlatSymbolRefAttr> params,
                                ArrayRef<SharedParamAttr> shared,
                                ArrayRef<FlatSymbolRefAttr> uses) {
  if (name.empty())
    return emitError() << "a #train.layer needs a name";
  llvm::SmallPtrSet<Attribute, 8> owned;
  for (FlatSymbolRefAttr p : params)
    if (!owned.insert(p).second)
      return emitError() << "#train.layer<\"" << name << "\"> lists " << p
                         << " twice";
  for (SharedParamAttr s : shared)
    if (!owned.contains(s.getParam()))
      return emitError() << "#train.layer<\"" << name << "\"> shares "
                         << s.getParam() << ", which it does not own";
  for (FlatSymbolRefAttr u : uses)
    if (owned.contains(u))
      return emitError() << "#train.layer<\"" << name << "\"> uses " << u
                         << ", which it owns";
  return success();
}
